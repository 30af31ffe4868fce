"""Writes the statements one count runs to stdout, for postgres --single: a prepared INSERT
into TABLE, then COUNT executions of it, each of ROWS rows (a 300-byte body, unique keys).
Usage: python3 statements.py TABLE COUNT ROWS"""
import sys
import uuid

table, count, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
body = "\\\\x7b2278223a22" + "61" * 290 + "227d"
columns = ("op_id, resource, fence, owner_id, destination, idempotency_key, request_hash, "
           "order_key, partition, method, path, headers, content_type, body, "
           "expire_with_generation, trace_context, trace_state")
print(f"PREPARE ins(uuid, uuid[], text[], bytea) AS INSERT INTO {table} ({columns}) "
      "SELECT u, 'res', 1, $1, 'api', k, '\\x00'::bytea, NULL, 7, 'POST', '/v1/items', "
      "'[]'::jsonb, 'application/json', $4, false, NULL, NULL FROM unnest($2, $3) AS x(u, k)")
for _ in range(count):
    ids = ",".join(str(uuid.uuid4()) for _ in range(rows))
    keys = ",".join(str(uuid.uuid4()) for _ in range(rows))
    print(f"EXECUTE ins('{uuid.uuid4()}', '{{{ids}}}', '{{{keys}}}', '{body}')")
