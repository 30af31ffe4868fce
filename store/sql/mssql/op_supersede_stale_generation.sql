-- expire_with_generation: pending ops whose token is no longer the newest of their resource
-- become superseded and are never sent (G5). The claim skips them too, atomically. Only the
-- partition's current leader marks them (G9): the lease is checked here too, read WITH
-- (HOLDLOCK, ROWLOCK), a shared lock on its key held until this autocommit statement commits
-- and a locking read of the latest committed row under READ COMMITTED and READ COMMITTED
-- SNAPSHOT alike (under RCSI a plain read takes no lock and reads a version): a takeover's
-- UPDATE of the lease row waits for it, or was waited for and is then seen.
-- The UPDATE finds its ops with update locks and checks them on the current row in both
-- modes; the newest token of each op's resource is a plain read, as in the PostgreSQL file
-- (tokens only grow, so an op found stale stays stale).
-- Time is SYSUTCDATETIME(), the database clock (G2).
-- Parameters: @P1 partition lease resource (nvarchar), @P2 owner id (uniqueidentifier),
-- @P3 token (bigint), @P4 partition count (int), @P5 partition index (int).
-- Returns one row: affected (bigint), how many ops were superseded.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

UPDATE o
SET state = 'superseded',
    finished_at = @now,
    last_error = CONCAT(N'token ', o.fence, N' is no longer the newest of its resource')
FROM dbo.outbox_ops AS o
WHERE o.state = 'pending'
  AND o.expire_with_generation = 1
  AND o.partition % @P4 = @P5
  AND o.fence < (SELECT g.fence FROM dbo.outbox_leases AS g WHERE g.resource = o.resource)
  AND EXISTS (
        SELECT 1
        FROM dbo.outbox_leases AS l WITH (HOLDLOCK, ROWLOCK)
        WHERE l.resource = @P1
          AND l.owner_id = @P2
          AND l.fence = @P3
          AND l.expires_at > @now);

SELECT CAST(@@ROWCOUNT AS bigint) AS affected;
