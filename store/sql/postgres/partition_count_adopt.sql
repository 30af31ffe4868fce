-- A starting dispatcher records its dispatcher.partitions as the count in force when there is
-- none yet; an existing count is left as it is (the dispatcher then reads it and refuses to
-- serve another). Two dispatchers starting at once: one insert wins, the other does nothing.
-- Parameters: $1 partitions, $2 changed_by, $3 reason.
INSERT INTO outbox_partition_count (partitions, changed_by, reason)
VALUES ($1, $2, $3)
ON CONFLICT (singleton) DO NOTHING
