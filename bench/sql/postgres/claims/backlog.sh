# Shared by count.sh and wal.sh; sourced after ../callgrind.sh, not run. Starts the throwaway
# cluster on port $1 with database `claims`: every migration, the store's statements wrapped
# by wrap.py, drain.sql, and a backlog of $2 ops, analyzed and checkpointed.
backlog_start() {
    cluster_start "$1" claims
    for f in "$repo"/migrations/postgres/00*.sql; do "${sql[@]}" -f "$f" >/dev/null 2>&1; done
    python3 "$here/wrap.py" "$repo" | "${sql[@]}"
    "${sql[@]}" -f "$here/drain.sql"
    "${sql[@]}" -c "CALL bench_fill($2)" -c "VACUUM ANALYZE" -c "CHECKPOINT"
}
