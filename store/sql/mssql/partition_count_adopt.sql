-- A starting dispatcher records its count when none is in force (see the postgres twin). The
-- range lock of UPDLOCK, HOLDLOCK on the missing row makes two concurrent starts insert once.
-- Parameters: @P1 partitions (int), @P2 changed_by (nvarchar), @P3 reason (nvarchar).
-- Returns nothing.
INSERT INTO dbo.outbox_partition_count (partitions, changed_by, reason)
SELECT @P1, @P2, @P3
WHERE NOT EXISTS (
    SELECT 1 FROM dbo.outbox_partition_count WITH (UPDLOCK, HOLDLOCK) WHERE singleton = 1
);
