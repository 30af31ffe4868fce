-- The fenced enqueue of a whole batch, in one statement, inside the batch's BEGIN IMMEDIATE
-- transaction: insert every op only if this owner and token hold an unexpired lease by the
-- database clock (G4), in batch order, skipping those whose (destination, idempotency key)
-- exists (G7, resolved by the caller in the same transaction). SQLite has no array
-- parameters, so the ops come as one JSON array; bytes are hex.
-- Parameters: ?1 resource, ?2 owner id, ?3 token, ?4 JSON array of objects {op_id,
-- destination, key, hash, order_key, partition, method, path, headers (JSON text),
-- content_type, body, expire, delay_ms (the queue rows take it), trace, trace_state}.
-- Returns the id and op id of each op inserted; their queue rows follow, due after each op's
-- delay_ms (op_queue_insert.sql, in the same transaction: 0013_queue_layout.sql).
INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, idempotency_key,
                             request_hash, order_key, partition, method, path, headers,
                             content_type, body, expire_with_generation, trace_context,
                             trace_state)
SELECT json_extract(o.value, '$.op_id'), ?1, ?3, ?2, json_extract(o.value, '$.destination'),
       json_extract(o.value, '$.key'), unhex(json_extract(o.value, '$.hash')),
       json_extract(o.value, '$.order_key'), json_extract(o.value, '$.partition'),
       json_extract(o.value, '$.method'), json_extract(o.value, '$.path'),
       json_extract(o.value, '$.headers'), json_extract(o.value, '$.content_type'),
       unhex(json_extract(o.value, '$.body')), json_extract(o.value, '$.expire'),
       json_extract(o.value, '$.trace'), json_extract(o.value, '$.trace_state')
FROM json_each(?4) AS o
WHERE EXISTS (SELECT 1
              FROM outbox_leases
              WHERE resource = ?1
                AND owner_id = ?2
                AND fence = ?3
                AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
ORDER BY o.key
ON CONFLICT (destination, idempotency_key) DO NOTHING
RETURNING id, op_id
