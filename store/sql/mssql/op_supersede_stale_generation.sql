-- expire_with_generation: pending ops whose token is no longer the newest of their resource
-- become superseded and are never sent (G5): their queue rows become finished rows
-- (0013_queue_layout.sql). The claim skips them too, atomically. Only the partition's current
-- leader marks them (G9): the lease is checked here too, read WITH (HOLDLOCK, ROWLOCK), a
-- shared lock on its key held until this batch's transaction commits and a locking read of
-- the latest committed row under READ COMMITTED and READ COMMITTED SNAPSHOT alike (under RCSI
-- a plain read takes no lock and reads a version): a takeover's UPDATE of the lease row waits
-- for it, or was waited for and is then seen.
-- The DELETE finds the flagged queue rows (IX_outbox_queue_generation) with update locks and
-- checks them on the current row in both modes; the newest token of each op's resource (the
-- request's) is a plain read, as in the PostgreSQL file (tokens only grow, so an op found
-- stale stays stale). The DELETE and the INSERT run in one transaction (XACT_ABORT ON).
-- Time is SYSUTCDATETIME(), the database clock (G2).
-- Parameters: @P1 partition lease resource (nvarchar), @P2 owner id (uniqueidentifier),
-- @P3 token (bigint), @P4 partition count (int), @P5 partition index (int).
-- Returns one row: affected (bigint), how many ops were superseded.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @gone TABLE (
    id                  bigint            NOT NULL PRIMARY KEY,
    fence               bigint            NOT NULL,
    attempts            int               NOT NULL,
    next_attempt_at     datetimeoffset(7) NOT NULL,
    retry_base_attempts int               NOT NULL,
    retry_since         datetimeoffset(7) NULL,
    last_attempt_trace  varchar(55)       NULL
);

BEGIN TRANSACTION;

DELETE FROM dbo.outbox_queue
OUTPUT deleted.id, deleted.fence, deleted.attempts, deleted.next_attempt_at,
       deleted.retry_base_attempts, deleted.retry_since, deleted.last_attempt_trace
INTO @gone (id, fence, attempts, next_attempt_at, retry_base_attempts, retry_since,
            last_attempt_trace)
WHERE expire_with_generation = 1
  AND claimed_by_fence IS NULL
  AND partition % @P4 = @P5
  AND fence < (
        SELECT g.fence
        FROM dbo.outbox_requests AS r
        INNER JOIN dbo.outbox_leases AS g ON g.resource = r.resource
        WHERE r.id = outbox_queue.id)
  AND EXISTS (
        SELECT 1
        FROM dbo.outbox_leases AS l WITH (HOLDLOCK, ROWLOCK)
        WHERE l.resource = @P1
          AND l.owner_id = @P2
          AND l.fence = @P3
          AND l.expires_at > @now);

INSERT INTO dbo.outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                                 retry_base_attempts, retry_since, last_attempt_trace)
SELECT g.id, 'superseded', g.attempts, g.next_attempt_at, @now,
       CONCAT(N'token ', g.fence, N' is no longer the newest of its resource'),
       g.retry_base_attempts, g.retry_since, g.last_attempt_trace
FROM @gone AS g;

COMMIT TRANSACTION;

SELECT CAST(COUNT_BIG(*) AS bigint) AS affected FROM @gone;
