-- In `outboxctl partitions set`'s transaction: the count in force, update-locked (a missing
-- row range-locked) until the change and its admin log row commit together.
-- Parameters: none.
-- Returns no row, or one: partitions.
SELECT partitions
FROM dbo.outbox_partition_count WITH (UPDLOCK, HOLDLOCK)
WHERE singleton = 1;
