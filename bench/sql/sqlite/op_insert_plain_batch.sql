-- Baseline for batches: many op rows in one plain INSERT (no lease check), from a JSON array
-- (SQLite has no array parameters). Parameters: ?1 resource, ?2 owner id, ?3 token, ?4 JSON
-- array of {op_id, key, hash (hex), partition, body (hex)}, ?5 the order key (NULL: unordered).
INSERT INTO outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                        request_hash, order_key, partition, method, path, headers,
                        content_type, body)
SELECT json_extract(value, '$.op_id'), ?1, ?3, ?2, 'statements', json_extract(value, '$.key'),
       unhex(json_extract(value, '$.hash')), ?5, json_extract(value, '$.partition'), 'POST',
       '/v1/statements', '[["X-Request-Source","bench"]]', 'application/json',
       unhex(json_extract(value, '$.body'))
FROM json_each(?4)
