-- On becoming leader of a partition: ops left in flight by an older dispatcher token go back
-- to pending, due now (G6). They may have been sent: delivery is at-least-once, and the next
-- attempt carries the same idempotency key (G7). Only while this dispatcher holds the lease.
-- Runs inside the takeover's transaction, after attempt_record_abandoned.sql:
-- - This lease is read WITH (HOLDLOCK, ROWLOCK): a shared lock on its key held to the end of
--   the transaction, a locking read of the latest committed row under READ COMMITTED and READ
--   COMMITTED SNAPSHOT alike (under RCSI a plain read takes no lock and reads a version), so
--   no newer takeover commits under it (G9).
-- - The UPDATE finds its queue rows with update locks and checks them on the current row in
--   both modes: an op whose completion is being written is waited for, then found gone (its
--   queue row deleted) or unclaimed and left alone; the ops re-queued stay locked until the
--   commit. No index covers the claim columns (so that a claim writes no index), so this scans
--   the queue, the unfinished ops only, once per term (0013_queue_layout.sql).
-- - Whether a claim's lease is still live is a plain read, as in the PostgreSQL file: a lease
--   that is not live under a token never becomes live again under it (renewal needs an
--   unexpired lease), so a version read errs only towards leaving a claim alone.
-- Time is SYSUTCDATETIME(), the database clock (G2).
-- Parameters: @P1 partition lease resource (nvarchar), @P2 owner id (uniqueidentifier),
-- @P3 token (bigint), @P4 partition count (int), @P5 partition index (int).
-- Returns one row: affected (bigint), how many ops were re-queued.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

UPDATE o
SET claimed_by_fence = NULL,
    claimed_by_lease = NULL,
    claimed_at = NULL,
    next_attempt_at = @now,
    last_error = CONCAT(N'dispatcher token ', o.claimed_by_fence,
                        N' lost its lease during the attempt')
FROM dbo.outbox_queue AS o
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
          AND l.expires_at > @now);

SELECT CAST(@@ROWCOUNT AS bigint) AS affected;
