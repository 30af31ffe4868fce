-- outboxctl tail: where to start following (the newest attempt's id, 0 when none).
-- Parameters: none.
SELECT coalesce(max(id), 0) AS id
FROM outbox_attempts
