-- The partition count in force (0006_partition_count.sql): no row until a dispatcher started
-- or an operator set one.
-- Parameters: none.
SELECT partitions, changed_at, changed_by, reason
FROM outbox_partition_count
WHERE singleton
