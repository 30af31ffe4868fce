-- The op holding a (destination, idempotency key), to tell a duplicate from a conflict (G7).
-- Reads the view outbox_ops (0013_queue_layout.sql) for the op's state: the request by its
-- (destination, idempotency_key) key, its queue or finished row by primary key.
-- Parameters: ?1 destination, ?2 idempotency key.
SELECT id, op_id, request_hash, state
FROM outbox_ops
WHERE destination = ?1
  AND idempotency_key = ?2
