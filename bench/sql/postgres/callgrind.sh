# Shared by the instruction counts of issue 36 (rules/count.sh, claims/count.sh); sourced, not
# run. A throwaway PostgreSQL cluster in a temporary directory (removed on exit), and a
# single-user backend run under callgrind, whose instruction count does not depend on what else
# the machine is doing. Needs valgrind and PostgreSQL's binaries (/usr/lib/postgresql/*/bin, or
# PG_BIN); run as root, it runs them as postgres.

bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
work=$(mktemp -d)
as_pg=()
if [ "$(id -u)" = 0 ]; then
    chown postgres "$work"
    as_pg=(runuser -u postgres --)
fi
trap '"${as_pg[@]}" "$bin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

# Starts the cluster on the socket directory $work, port $1, with an empty database $2; `sql`
# is then psql for it.
cluster_start() {
    "${as_pg[@]}" "$bin/initdb" -D "$work/data" -A trust -U postgres >/dev/null
    "${as_pg[@]}" "$bin/pg_ctl" -D "$work/data" -l "$work/log" -w \
        -o "-p $1 -k $work -c listen_addresses=''" start >/dev/null
    sql=(psql -X -q -v ON_ERROR_STOP=1 -h "$work" -p "$1" -U postgres -d "$2")
    psql -X -q -v ON_ERROR_STOP=1 -h "$work" -p "$1" -U postgres -d postgres \
        -c "CREATE DATABASE $2"
}

cluster_stop() {
    "${as_pg[@]}" "$bin/pg_ctl" -D "$work/data" -w stop >/dev/null
}

# Runs the statements of file $3 (one a line) in database $2 of data directory $1 in a
# single-user backend under callgrind (further arguments are the backend's: settings), its
# output in $3.stdout, and prints the instructions it took. Exits when a statement failed.
single_user_instructions() {
    local data=$1 db=$2 input=$3
    shift 3
    "${as_pg[@]}" valgrind --tool=callgrind --callgrind-out-file="$input.cg" \
        "$bin/postgres" --single -D "$data" -c fsync=off -c full_page_writes=off -c jit=off \
        "$@" "$db" < "$input" > "$input.stdout" 2> "$input.stderr"
    if grep -q ERROR "$input.stdout" "$input.stderr"; then
        grep ERROR "$input.stdout" "$input.stderr" | head -3 >&2
        exit 1
    fi
    awk '/^(summary|totals):/ { print $2; exit }' "$input.cg"
}
