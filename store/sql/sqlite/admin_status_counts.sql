-- outboxctl status: how many ops each state holds, per destination.
-- Parameters: none. Reads the whole table: run by hand, not polled.
SELECT state, destination, count(*) AS ops
FROM outbox_ops
GROUP BY state, destination
ORDER BY state, destination
