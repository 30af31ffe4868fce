-- The partition count in force (see the postgres twin).
-- Parameters: none.
-- Returns no row, or one: partitions, changed_at, changed_by, reason.
SELECT partitions, changed_at, changed_by, reason
FROM dbo.outbox_partition_count
WHERE singleton = 1;
