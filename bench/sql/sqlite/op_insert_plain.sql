-- Baseline: the same rows as the fenced enqueue (the request and its queue row,
-- 0013_queue_layout.sql), inserted with no lease check, in one BEGIN IMMEDIATE transaction as
-- the enqueue's. Parameters as op_insert_if_lease_held.sql without the lease: ?1 resource,
-- ?2 owner id, ?3 token, ?4 op id, ?5 destination, ?6 idempotency key, ?7 request hash,
-- ?8 order key, ?9 partition, ?10 method, ?11 path, ?12 headers, ?13 content type, ?14 body.
INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, idempotency_key,
                             request_hash, order_key, partition, method, path, headers,
                             content_type, body)
VALUES (?4, ?1, ?3, ?2, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14);

INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                          expire_with_generation)
SELECT id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), partition, destination, fence, order_key,
       expire_with_generation
FROM outbox_requests
WHERE id = last_insert_rowid()
