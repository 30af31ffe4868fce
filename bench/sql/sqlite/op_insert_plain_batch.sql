-- Baseline for batches: many ops (requests and their queue rows, 0013_queue_layout.sql) in one
-- plain INSERT each (no lease check), from a JSON array (SQLite has no array parameters), in
-- one BEGIN IMMEDIATE transaction. Parameters: ?1 resource, ?2 owner id, ?3 token, ?4 JSON
-- array of {op_id, key, hash (hex), partition, body (hex)}, ?5 the order key (NULL: unordered).
INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, idempotency_key,
                             request_hash, order_key, partition, method, path, headers,
                             content_type, body)
SELECT json_extract(value, '$.op_id'), ?1, ?3, ?2, 'statements', json_extract(value, '$.key'),
       unhex(json_extract(value, '$.hash')), ?5, json_extract(value, '$.partition'), 'POST',
       '/v1/statements', '[["X-Request-Source","bench"]]', 'application/json',
       unhex(json_extract(value, '$.body'))
FROM json_each(?4);

INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                          expire_with_generation)
SELECT r.id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), r.partition, r.destination, r.fence,
       r.order_key, r.expire_with_generation
FROM json_each(?4) AS o
CROSS JOIN outbox_requests AS r
WHERE r.op_id = json_extract(o.value, '$.op_id')
