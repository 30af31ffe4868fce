-- On becoming leader of a partition, before re-queueing: close the attempts that older
-- dispatcher tokens left open, with outcome 'unknown' (the request may have been sent).
-- Runs inside the takeover's transaction, before op_requeue_abandoned.sql:
-- - This lease is read WITH (HOLDLOCK, ROWLOCK): a shared lock on its key held to the end of
--   the transaction, a locking read of the latest committed row under READ COMMITTED and READ
--   COMMITTED SNAPSHOT alike (under RCSI a plain read takes no lock and reads a version), so
--   no newer takeover commits under it (G9).
-- - The claimed queue rows are read WITH (READCOMMITTEDLOCK): an op whose completion is being
--   written (locked) is waited for and then seen as committed (its queue row gone, or
--   unclaimed), under RCSI too, where a plain read would see it still in flight and record an
--   attempt that did end. The shared locks are not kept, so a completion is never blocked by
--   them. No index covers the claim columns (so that a claim writes no index), so this scans
--   the queue, the unfinished ops only, once per term (0013_queue_layout.sql); the op id is
--   the request's, read by its primary key.
-- - An (op_id, attempt) that exists already is skipped, as ON CONFLICT DO NOTHING does: the
--   check reads WITH (UPDLOCK, HOLDLOCK), a key-range lock held to the end of the transaction,
--   so a completion cannot insert it between the check and the insert.
-- - Whether a claim's lease is still live is a plain read, as in the PostgreSQL file: a lease
--   that is not live under a token never becomes live again under it (renewal needs an
--   unexpired lease), so a version read errs only towards leaving a claim alone.
-- Time is SYSUTCDATETIME(), the database clock (G2).
-- Parameters: @P1 partition lease resource (nvarchar), @P2 owner id (uniqueidentifier),
-- @P3 token (bigint), @P4 partition count (int), @P5 partition index (int).
-- Returns nothing.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

INSERT INTO dbo.outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at,
                                 outcome, error)
SELECT r.op_id,
       o.attempts,
       o.claimed_by_fence,
       o.claimed_at,
       @now,
       'unknown',
       CONCAT(N'dispatcher token ', o.claimed_by_fence, N' lost its lease during the attempt')
FROM dbo.outbox_queue AS o WITH (READCOMMITTEDLOCK)
INNER JOIN dbo.outbox_requests AS r ON r.id = o.id
WHERE o.claimed_by_fence IS NOT NULL
  AND o.partition % @P4 = @P5
  -- Left by a claim whose lease is no longer live under its token: an older holder of this
  -- partition, or of a lease of another partition count that has lapsed. A claim of a live
  -- lease (this one's, or another dispatcher's still serving) is never taken (G12).
  AND NOT EXISTS (
        SELECT 1
        FROM dbo.outbox_leases AS h
        WHERE h.resource = o.claimed_by_lease
          AND h.fence = o.claimed_by_fence
          AND h.owner_id IS NOT NULL
          AND h.expires_at > @now)
  AND EXISTS (
        SELECT 1
        FROM dbo.outbox_leases AS l WITH (HOLDLOCK, ROWLOCK)
        WHERE l.resource = @P1
          AND l.owner_id = @P2
          AND l.fence = @P3
          AND l.expires_at > @now)
  AND NOT EXISTS (
        SELECT 1
        FROM dbo.outbox_attempts AS a WITH (UPDLOCK, HOLDLOCK)
        WHERE a.op_id = r.op_id
          AND a.attempt = o.attempts);
