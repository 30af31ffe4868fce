-- Baseline for batches: many op rows in one plain INSERT (no lease check), from arrays.
-- Parameters: $1 resource, $2 owner id, $3 token, then arrays: $4 op ids, $5 idempotency keys,
-- $6 request hashes, $7 partitions, $8 bodies; $9 the order key (NULL: unordered); the other
-- columns are the workload's constants.
INSERT INTO outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                        request_hash, order_key, partition, method, path, headers,
                        content_type, body)
SELECT u.op_id, $1, $3, $2, 'statements', u.idempotency_key, u.request_hash, $9::text, u.partition,
       'POST', '/v1/statements', '[["X-Request-Source","bench"]]'::jsonb, 'application/json', u.body
FROM unnest($4::uuid[], $5::text[], $6::bytea[], $7::int[], $8::bytea[])
     AS u(op_id, idempotency_key, request_hash, partition, body)
