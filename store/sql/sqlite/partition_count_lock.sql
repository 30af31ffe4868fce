-- In `outboxctl partitions set`'s transaction (BEGIN IMMEDIATE holds the write lock): the
-- count in force.
-- Parameters: none.
SELECT partitions
FROM outbox_partition_count
WHERE singleton = 1
