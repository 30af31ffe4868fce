-- outboxctl status: how many ops each state holds, per destination.
-- Parameters: none. Reads the whole table (UQ_outbox_ops_destination_key is the narrowest
-- index holding both columns): run by hand, not polled. A plain read for operators: a
-- statement snapshot under READ COMMITTED SNAPSHOT, short shared locks under READ COMMITTED.
-- Returns state (varchar), destination (varchar), ops (bigint), by state then destination.
SELECT state, destination, COUNT_BIG(*) AS ops
FROM dbo.outbox_ops
GROUP BY state, destination
ORDER BY state, destination;
