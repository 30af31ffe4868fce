-- A dispatcher process leaves on graceful shutdown, or forgets processes gone for long.
-- Parameters: @P1 instance id (uniqueidentifier, NULL: none), @P2 milliseconds past its ttl
-- after which a silent process's row is deleted (bigint).
-- Returns one row: affected (bigint), how many rows were deleted.
SET NOCOUNT ON;

DELETE FROM dbo.outbox_dispatchers
WHERE instance_id = @P1
   OR DATEADD(MILLISECOND, ttl_ms + @P2, heartbeat_at) < CAST(SYSUTCDATETIME() AS datetimeoffset(7));

SELECT CAST(@@ROWCOUNT AS bigint) AS affected;
