-- outboxctl list --key K without --destination: the destinations in use, read from
-- outbox_requests' (destination, idempotency_key) key one value at a time (a loose index scan:
-- one probe per destination, not a read of the table), so the key is then looked up per
-- destination in that index.
-- Parameters: none.
WITH RECURSIVE d (destination) AS (
    SELECT min(destination) FROM outbox_requests
    UNION ALL
    SELECT (SELECT min(o.destination) FROM outbox_requests o WHERE o.destination > d.destination)
    FROM d
    WHERE d.destination IS NOT NULL
)
SELECT destination FROM d WHERE destination IS NOT NULL
