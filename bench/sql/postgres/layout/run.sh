#!/usr/bin/env bash
# Issue 36's layout prototype: for each layout, a fresh database, 50k fenced enqueues (a commit
# each), then a drain by claims of 128 completed one batch behind (a commit per statement).
# A CHECKPOINT before each measured phase keeps its full-page images out of the WAL figures;
# synchronous_commit is off in the loop's session, so a commit costs its WAL, not the disk's flush.
# Usage: bash bench/sql/postgres/layout/run.sh [DATABASE_URL] [layouts...]
#   DATABASE_URL: a database the role can connect to and CREATE DATABASE from (default
#   postgres://postgres@127.0.0.1:5432/postgres); the role must be allowed to CHECKPOINT.
#   layouts: any of a b c100 c70 c40 d e checks correctness (default: all but e, which needs
#   the pgq extension on the server, and correctness). Env OPS (default 50000).
set -euo pipefail

url=${1:-postgres://postgres@127.0.0.1:5432/postgres}
shift || true
layouts=${*:-a b c100 c70 c40 d checks}
ops=${OPS:-50000}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../../.." && pwd)

psql_base=(psql "$url" -X -q -v ON_ERROR_STOP=1 -v ops="$ops")

# Runs stdin against a fresh database named $1 (created through $url, dropped at the end).
fresh() {
    local db=$1
    "${psql_base[@]}" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
    { printf '\\c %s\n' "$db"; printf 'SET jit = off;\nSET synchronous_commit = off;\n'; cat; } | "${psql_base[@]}"
    "${psql_base[@]}" -c "DROP DATABASE $db"
}

measure() {
    cat <<SQL
CHECKPOINT;
CALL bench_enqueue(:ops);
CHECKPOINT;
CALL bench_drain();
\\pset footer off
SELECT layout, phase, ops,
       round(micros / ops, 1) AS us_per_op,
       round(wal_bytes / ops) AS wal_b_per_op,
       coalesce(note, '') AS note
FROM bench_result ORDER BY at;
SQL
}

# How many of the table's updates were HOT (the statistics flushed first).
hot() {
    printf 'SELECT pg_stat_force_next_flush();\n'
    printf 'SELECT relname, n_tup_upd, n_tup_hot_upd, round(100.0 * n_tup_hot_upd / nullif(n_tup_upd, 0)) AS hot_pct FROM pg_stat_user_tables WHERE relname = %s;\n' "'$1'"
}

for layout in $layouts; do
    case $layout in
    a)
        {
            cat "$here/common.sql"
            for f in "$repo"/migrations/postgres/*.sql; do cat "$f"; printf '\n'; done
            cat "$here/a_today.sql"
            measure
        } | fresh proto36_a
        ;;
    b)
        { cat "$here/common.sql" "$here/b_job_table.sql"; measure; hot jobs; } | fresh proto36_b
        ;;
    c[0-9]*)
        ff=${layout#c}
        {
            cat "$here/common.sql"
            printf '\\set fillfactor %s\n' "$ff"
            cat "$here/c_split.sql"
            measure
            hot outbox_queue
        } | fresh proto36_c
        ;;
    d)
        { cat "$here/common.sql"; printf '\\set fillfactor 100\n'; cat "$here/c_split.sql" "$here/d_batch_claim.sql"; measure; } | fresh proto36_d
        ;;
    correctness)
        { cat "$here/common.sql"; printf '\\set fillfactor 40\n'; cat "$here/c_split.sql" "$here/d_batch_claim.sql" "$here/correctness.sql"; } | fresh proto36_correctness
        ;;
    e)
        # Needs the pgq extension installed on the server (Debian: postgresql-15-pgq3).
        { cat "$here/common.sql" "$here/e_pgq.sql"; measure; } | fresh proto36_e
        ;;
    checks)
        {
            cat "$here/common.sql"
            for f in "$repo"/migrations/postgres/*.sql; do cat "$f"; printf '\n'; done
            cat "$here/checks.sql"
        } | fresh proto36_checks
        ;;
    *)
        echo "unknown layout: $layout" >&2
        exit 2
        ;;
    esac
done
