-- A dispatcher process says it is alive, on the database clock (see the postgres twin). An
-- upsert in one transaction, the key locked WITH (UPDLOCK, HOLDLOCK) to the commit, as
-- wakeup_set.sql.
-- Parameters: @P1 instance id (uniqueidentifier), @P2 host, @P3 pid (bigint), @P4 ttl in
-- milliseconds (bigint), @P5 partitions (int), @P6 led (int).
-- Returns nothing.
SET NOCOUNT ON;
SET XACT_ABORT ON;

BEGIN TRANSACTION;

UPDATE dbo.outbox_dispatchers WITH (UPDLOCK, HOLDLOCK)
SET heartbeat_at = CAST(SYSUTCDATETIME() AS datetimeoffset(7)),
    ttl_ms = @P4,
    partitions = @P5,
    led = @P6
WHERE instance_id = @P1;

IF @@ROWCOUNT = 0
    INSERT INTO dbo.outbox_dispatchers (instance_id, host, pid, ttl_ms, partitions, led)
    VALUES (@P1, @P2, @P3, @P4, @P5, @P6);

COMMIT TRANSACTION;
