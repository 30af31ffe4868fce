-- outboxctl replay: ops back to pending, due now, with a fresh retry budget (0002_admin.sql);
-- the attempt history and the idempotency key are kept. Only ops admin_op_lock.sql locked and
-- admin.rs allowed, inside the same transaction: they are still held WITH (UPDLOCK, HOLDLOCK)
-- from there, under READ COMMITTED and READ COMMITTED SNAPSHOT alike (a locking read, never a
-- version), and this UPDATE converts those locks to exclusive ones, held to the commit. SQL
-- Server has no LISTEN: dispatchers poll, and claim the ops on their next cycle.
-- Time is SYSUTCDATETIME(), read once (the database clock, G2).
-- Parameters: @P1 op row ids (nvarchar, a JSON array of numbers).
-- Returns one row: replayed (bigint), how many were replayed.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

UPDATE dbo.outbox_ops
SET state = 'pending',
    next_attempt_at = @now,
    claimed_by_fence = NULL,
    claimed_by_lease = NULL,
    claimed_at = NULL,
    delivered_at = NULL,
    finished_at = NULL,
    retry_base_attempts = attempts,
    retry_since = @now
WHERE id IN (SELECT CAST(j.value AS bigint) AS id FROM OPENJSON(@P1) AS j);

SELECT CAST(@@ROWCOUNT AS bigint) AS replayed;
