-- Baseline for batches: many ops (requests and their queue rows, 0013_queue_layout.sql) in one
-- plain INSERT statement (no lease check), from arrays.
-- Parameters: $1 resource, $2 owner id, $3 token, then arrays: $4 op ids, $5 idempotency keys,
-- $6 request hashes, $7 partitions, $8 bodies; $9 the order key (NULL: unordered); the other
-- columns are the workload's constants.
WITH request AS (
    INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, idempotency_key,
                                 request_hash, order_key, partition, method, path, headers,
                                 content_type, body)
    SELECT u.op_id, $1, $3, $2, 'statements', u.idempotency_key, u.request_hash, $9::text,
           u.partition, 'POST', '/v1/statements', '[["X-Request-Source","bench"]]'::jsonb,
           'application/json', u.body
    FROM unnest($4::uuid[], $5::text[], $6::bytea[], $7::int[], $8::bytea[])
         AS u(op_id, idempotency_key, request_hash, partition, body)
    RETURNING id, partition, destination, fence, order_key, expire_with_generation
)
INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                          expire_with_generation)
SELECT id, clock_timestamp(), partition, destination, fence, order_key, expire_with_generation
FROM request
