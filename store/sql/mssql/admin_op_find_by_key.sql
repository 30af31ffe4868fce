-- outboxctl show --destination D --key K: the op holding a destination's idempotency key, by
-- UQ_outbox_ops_destination_key. Only the row id: the request's hash and content stay unread.
-- Parameters: @P1 destination, @P2 idempotency key.
-- Returns id bigint, or no row.
SELECT id
FROM dbo.outbox_requests
WHERE destination = @P1
  AND idempotency_key = @P2;
