-- Extend a lease that this owner still holds; the token stays the same.
-- G3: needs the same owner id and token and an unexpired lease (database clock,
-- SYSUTCDATETIME()), so an expired generation is never revived and an old owner cannot extend
-- a newer one. SQL Server reads SYSUTCDATETIME() once when a statement starts, and an UPDATE
-- may then wait for the row (an enqueue's transaction holds it share-locked to its commit): a
-- lease that expired during that wait would be judged by the earlier time and revived. So the
-- row is locked first (UPDLOCK, HOLDLOCK: the same under READ COMMITTED and READ COMMITTED
-- SNAPSHOT), and only then is the time read and the condition checked on the current row.
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 ttl in milliseconds.
-- Returns one row (expires_at datetimeoffset) when renewed, none otherwise.
SET NOCOUNT ON;

BEGIN TRANSACTION;

DECLARE @locked int;
SELECT @locked = 1
FROM dbo.outbox_leases WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
WHERE resource = @P1;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

UPDATE dbo.outbox_leases
SET expires_at = DATEADD(MILLISECOND, CAST(@P4 AS int), @now)
OUTPUT inserted.expires_at
WHERE resource = @P1
  AND owner_id = @P2
  AND fence = @P3
  AND expires_at > @now;

COMMIT TRANSACTION;
