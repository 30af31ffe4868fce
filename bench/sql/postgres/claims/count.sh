#!/usr/bin/env bash
# Issue 36, item 3: PostgreSQL's work per delivered op by the claim's size, in instructions and
# WAL bytes. A throwaway cluster gets every migration and drain.sql; for each size, a copy of
# its data directory with a backlog of OPS ops is drained by a single-user backend under
# callgrind, and a copy without a drain gives the fixed start-up cost to take off.
# Usage: bash bench/sql/postgres/claims/count.sh [sizes...]   (default 8 16 32 64 128; OPS=5000;
# needs valgrind, python3, PostgreSQL: see ../callgrind.sh)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
. "$here/../callgrind.sh"
. "$here/backlog.sh"
sizes=${*:-8 16 32 64 128}
ops=${OPS:-5000}

backlog_start 5497 "$ops"
cluster_stop

# Instructions, WAL LSNs before and after, and what is left in the queue, of one single-user
# session running statement $2 on a fresh copy of the data directory.
run() {
    local input="$work/in.$1"
    rm -rf "$work/copy"
    "${as_pg[@]}" cp -a "$work/data" "$work/copy"
    printf 'SELECT pg_current_wal_insert_lsn()\n%s\nSELECT pg_current_wal_insert_lsn()\n%s\n' "$2" \
        "SELECT count(*) AS left_in_queue FROM outbox_queue" > "$input"
    local ir
    ir=$(single_user_instructions "$work/copy" claims "$input")
    local left
    left=$(grep -o 'left_in_queue = "[0-9]*"' "$input.stdout" | grep -o '[0-9]*')
    if [ "$1" != base ] && [ "$left" != 0 ]; then
        echo "$1 left $left ops in the queue" >&2
        exit 1
    fi
    echo "$ir $(grep -o '"[0-9A-F]*/[0-9A-F]*"' "$input.stdout" | tr -d '"' | tr '\n' ' ')"
}

lsn_bytes() { # 0/1A2B -> bytes
    local hi=${1%/*} lo=${1#*/}
    echo $(( (16#$hi << 32) + 16#$lo ))
}

read -r base _ <<< "$(run base 'SELECT 1')"
printf '%-6s %14s %14s\n' claim Ir/op WAL_B/op
for size in $sizes; do
    read -r ir l0 l1 <<< "$(run "c$size" "CALL bench_drain($size)")"
    wal=$(( $(lsn_bytes "$l1") - $(lsn_bytes "$l0") ))
    printf '%-6s %14d %14d\n' "$size" $(( (ir - base) / ops )) $(( wal / ops ))
done
