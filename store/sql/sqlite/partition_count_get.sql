-- The partition count in force (see the postgres twin).
-- Parameters: none.
SELECT partitions, changed_at, changed_by, reason
FROM outbox_partition_count
WHERE singleton = 1
