#!/usr/bin/env bash
# Issue 36: what the request's rules cost PostgreSQL per enqueue statement, in instructions.
# A throwaway cluster gets migrations 0001-0013 and three copies of outbox_requests
# (tables.sql): the eight CHECK constraints, none, and 0014's trigger. Each copy is filled by a
# single-user backend under callgrind with a prepared INSERT run FEW and then MANY times; the
# difference divided by the extra statements (and rows) is what one costs, start-up and
# first-use costs cancelled out.
# Usage: bash bench/sql/postgres/rules/count.sh   (needs valgrind, python3, PostgreSQL: see
# ../callgrind.sh)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
. "$here/../callgrind.sh"

cluster_start 5498 rules
for f in "$repo"/migrations/postgres/00*.sql; do
    case $(basename "$f") in 0014_*) "${sql[@]}" -f "$here/tables.sql" ;; esac
    "${sql[@]}" -f "$f" >/dev/null 2>&1
done
"${sql[@]}" -f "$here/trigger.sql"
cluster_stop

# Instructions one backend spends running COUNT statements of ROWS rows into TABLE.
instructions() {
    local input="$work/in.$1.$2.$3"
    python3 "$here/statements.py" "$1" "$2" "$3" > "$input"
    single_user_instructions "$work/data" rules "$input" -c synchronous_commit=off
}

printf '%-12s %8s %16s %14s\n' table rows Ir/statement Ir/row
for rows in 1 100; do
    if [ "$rows" = 1 ]; then few=50; many=350; else few=5; many=25; fi
    for table in req_checks req_none req_trigger; do
        a=$(instructions "$table" "$few" "$rows")
        b=$(instructions "$table" "$many" "$rows")
        per=$(( (b - a) / (many - few) ))
        printf '%-12s %8d %16d %14d\n' "$table" "$rows" "$per" $(( per / rows ))
    done
done
