-- A starting dispatcher records its count when none is in force (see the postgres twin).
-- The singleton is given: an INTEGER PRIMARY KEY ignores its default (it is the rowid).
-- Parameters: ?1 partitions, ?2 changed_by, ?3 reason.
INSERT INTO outbox_partition_count (singleton, partitions, changed_by, reason)
VALUES (1, ?1, ?2, ?3)
ON CONFLICT (singleton) DO NOTHING
