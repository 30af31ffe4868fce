-- Baseline: the same op row as the fenced enqueue, inserted with no lease check and no
-- notification. Parameters as op_insert_if_lease_held.sql without the lease: $1 resource,
-- $2 owner id, $3 token, $4 op id, $5 destination, $6 idempotency key, $7 request hash,
-- $8 order key, $9 partition, $10 method, $11 path, $12 headers, $13 content type, $14 body.
INSERT INTO outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                        request_hash, order_key, partition, method, path, headers,
                        content_type, body)
VALUES ($4, $1, $3, $2, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13, $14)
