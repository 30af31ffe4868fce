-- outboxctl show --destination D --key K: the op holding a destination's idempotency key, by
-- the requests' (destination, idempotency_key) key. Reads outbox_request_meta
-- (0016_component_roles.sql), which the viewer role may read.
-- Parameters: $1 destination, $2 idempotency key.
SELECT id
FROM outbox_request_meta
WHERE destination = $1
  AND idempotency_key = $2
