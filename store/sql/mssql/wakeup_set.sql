-- A dispatcher partition says whether it is idle and wants to be woken. SQL Server has no
-- LISTEN/NOTIFY (its dispatchers poll); the row is kept so operators see the same state on
-- every backend.
-- An upsert in one MERGE statement WITH (HOLDLOCK): the key(-range) lock on the partition's
-- primary key is held until the statement commits, under READ COMMITTED and READ COMMITTED
-- SNAPSHOT alike, so two first calls for one partition insert one row and the second updates.
-- Time is SYSUTCDATETIME(), the database clock.
-- Parameters: @P1 partition index (int), @P2 listening (bit).
-- Returns nothing.
MERGE INTO dbo.outbox_wakeups WITH (HOLDLOCK) AS w
USING (SELECT @P1 AS partition, @P2 AS listening) AS s
    ON w.partition = s.partition
WHEN MATCHED THEN
    UPDATE SET listening = s.listening,
               changed_at = CAST(SYSUTCDATETIME() AS datetimeoffset(7))
WHEN NOT MATCHED THEN
    INSERT (partition, listening, changed_at)
    VALUES (s.partition, s.listening, CAST(SYSUTCDATETIME() AS datetimeoffset(7)));
