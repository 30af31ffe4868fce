-- outboxctl show --destination D --key K: the op holding a destination's idempotency key, by
-- the requests' (destination, idempotency_key) key.
-- Parameters: ?1 destination, ?2 idempotency key.
SELECT id
FROM outbox_requests
WHERE destination = ?1
  AND idempotency_key = ?2
