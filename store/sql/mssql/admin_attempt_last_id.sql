-- outboxctl tail: where to start following (the newest attempt's id, 0 when none).
-- A plain read of the primary key's last row (a statement snapshot under READ COMMITTED
-- SNAPSHOT, a short shared lock under READ COMMITTED); nothing is decided from it.
-- Parameters: none.
-- Returns one row: id (bigint).
SELECT COALESCE(MAX(id), CAST(0 AS bigint)) AS id
FROM dbo.outbox_attempts;
