-- In `outboxctl partitions set`'s transaction: the new count in force, who and why, on the
-- database clock.
-- Parameters: $1 partitions, $2 changed_by, $3 reason.
INSERT INTO outbox_partition_count (partitions, changed_by, reason)
VALUES ($1, $2, $3)
ON CONFLICT (singleton) DO UPDATE
SET partitions = excluded.partitions,
    changed_at = clock_timestamp(),
    changed_by = excluded.changed_by,
    reason = excluded.reason
