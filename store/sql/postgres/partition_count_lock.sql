-- In `outboxctl partitions set`'s transaction: the count in force, locked until the change
-- and its admin log row commit together.
-- Parameters: none.
SELECT partitions
FROM outbox_partition_count
WHERE singleton
FOR UPDATE
