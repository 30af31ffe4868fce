-- The SQL API's fenced enqueue (migration 0004_sql_api) as a worker in another language calls
-- it: one autocommit statement with positional arguments, the options after the idempotency
-- key left to their defaults. The same op as the Rust path's single enqueue.
-- Parameters: $1 resource, $2 owner id, $3 token, $4 destination, $5 method, $6 path,
-- $7 headers (JSON text), $8 body, $9 content type, $10 idempotency key.
SELECT op_id, seq, duplicate
FROM outbox.enqueue($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10)
