#!/usr/bin/env bash
# Issue 36: where the WAL of a delivered op goes, by relation. A throwaway cluster gets every
# migration and drain.sql, a backlog of OPS ops and a CHECKPOINT; the store's own claim and
# completion drain it by claims of SIZE ops (default 16, today's average with the defaults), a
# commit after each statement, on a running server with its default settings (full-page
# writes on, as in `outbox-bench`); then pg_waldump reads the drain's WAL and sums each
# record's length by the relation of its first block (or by its resource manager when it has
# none: commits, for one), per delivered op.
# Usage: bash bench/sql/postgres/claims/wal.sh   (SIZE=16, OPS=5000; needs PostgreSQL's
# binaries and python3, see ../callgrind.sh; valgrind is not used)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
. "$here/../callgrind.sh"
. "$here/backlog.sh"
size=${SIZE:-16}
ops=${OPS:-5000}

backlog_start 5498 "$ops"
start=$("${sql[@]}" -At -c "SELECT pg_current_wal_insert_lsn()")
"${sql[@]}" -c "CALL bench_drain($size)"
end=$("${sql[@]}" -At -c "SELECT pg_current_wal_insert_lsn()")
left=$("${sql[@]}" -At -c "SELECT count(*) FROM outbox_queue")
if [ "$left" != 0 ]; then
    echo "the drain left $left ops in the queue" >&2
    exit 1
fi
"${sql[@]}" -At -F ' ' -c "SELECT pg_relation_filenode(oid), relname FROM pg_class
                           WHERE pg_relation_filenode(oid) IS NOT NULL" > "$work/names"
"${as_pg[@]}" "$bin/pg_waldump" -p "$work/data/pg_wal" -s "$start" -e "$end" > "$work/records"
[ -n "${KEEP_RECORDS:-}" ] && cp "$work/records" "$work/names" "$KEEP_RECORDS"/
python3 - "$work/names" "$work/records" "$ops" "$size" <<'PY'
import re, sys
names = dict(line.split(' ', 1) for line in open(sys.argv[1]).read().splitlines())
ops, size = int(sys.argv[3]), sys.argv[4]
total, by = 0, {}
for line in open(sys.argv[2]):
    m = re.search(r'rmgr: (\S+)\s+len \(rec/tot\):\s*\d+/\s*(\d+)', line)
    if not m:
        continue
    rel = re.search(r'blkref #0: rel \d+/\d+/(\d+)', line)
    key = names.get(rel.group(1), 'relation ' + rel.group(1)) if rel else '(' + m.group(1) + ')'
    n, b = by.get(key, (0, 0))
    by[key] = (n + 1, b + int(m.group(2)))
    total += int(m.group(2))
print(f"{ops} ops drained by claims of {size}: {total / ops:.0f} B of WAL per delivered op")
print(f"{'relation (or resource manager)':40} {'records/op':>10} {'B/op':>8}")
for key, (n, b) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"{key:40} {n / ops:10.2f} {b / ops:8.0f}")
PY
