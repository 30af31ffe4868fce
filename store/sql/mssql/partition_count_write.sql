-- In `outboxctl partitions set`'s transaction: the new count in force, who and why, on the
-- database clock. An upsert: the UPDATE reads the singleton's key WITH (UPDLOCK, HOLDLOCK),
-- held to the caller's commit, and the INSERT runs only when there was no row (the lock on the
-- empty range keeps a second writer out until then). Not MERGE: Babelfish does not run it.
-- Parameters: @P1 partitions (int), @P2 changed_by (nvarchar), @P3 reason (nvarchar).
-- Returns nothing.
SET NOCOUNT ON;

UPDATE dbo.outbox_partition_count WITH (UPDLOCK, HOLDLOCK)
SET partitions = @P1,
    changed_at = CAST(SYSUTCDATETIME() AS datetimeoffset(7)),
    changed_by = @P2,
    reason = @P3
WHERE singleton = 1;

IF @@ROWCOUNT = 0
    INSERT INTO dbo.outbox_partition_count (partitions, changed_by, reason)
    VALUES (@P1, @P2, @P3);
