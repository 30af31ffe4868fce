-- A dispatcher partition says whether it is idle and wants to be woken. SQL Server has no
-- LISTEN/NOTIFY (its dispatchers poll); the row is kept so operators see the same state on
-- every backend.
-- An upsert in one transaction: the UPDATE reads the key WITH (UPDLOCK, HOLDLOCK), a lock on
-- the partition's key (or its empty range) held to the commit under READ COMMITTED and READ
-- COMMITTED SNAPSHOT alike, so two first calls for one partition insert one row and the second
-- updates it. (Not MERGE: Babelfish for PostgreSQL does not run it.)
-- Time is SYSUTCDATETIME(), the database clock.
-- Parameters: @P1 partition index (int), @P2 listening (bit).
-- Returns nothing.
SET NOCOUNT ON;
SET XACT_ABORT ON;

BEGIN TRANSACTION;

UPDATE dbo.outbox_wakeups WITH (UPDLOCK, HOLDLOCK)
SET listening = @P2,
    changed_at = CAST(SYSUTCDATETIME() AS datetimeoffset(7))
WHERE partition = @P1;

IF @@ROWCOUNT = 0
    INSERT INTO dbo.outbox_wakeups (partition, listening, changed_at)
    VALUES (@P1, @P2, CAST(SYSUTCDATETIME() AS datetimeoffset(7)));

COMMIT TRANSACTION;
