-- Retention: delete up to @P2 ops that finished (delivered, cancelled, superseded) more than
-- @P1 milliseconds ago, with their attempts (ON DELETE CASCADE). Dead ops stay for operators.
-- The DELETE finds its rows WITH (READPAST, ROWLOCK): a row locked by a concurrent change (an
-- operator's replay) is skipped, never waited for, and the others are taken with update locks
-- and checked on the current row, under READ COMMITTED and READ COMMITTED SNAPSHOT alike, so
-- one changed meanwhile is re-checked as it is now, never deleted for what it was (G6). The
-- first state term repeats the filtered index's predicate (IX_outbox_ops_finished), so the
-- rows are found by finish time there.
-- Time is SYSUTCDATETIME(), the database clock; @P1 (at most 3650 days by configuration) is
-- split into seconds and milliseconds so DATEADD's int argument never overflows.
-- Parameters: @P1 age in milliseconds (bigint), @P2 batch size (bigint).
-- Returns one row: affected (bigint), how many ops were deleted (their attempts not counted).
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @before datetimeoffset(7) =
    DATEADD(MILLISECOND, -CAST(@P1 % 1000 AS int), DATEADD(SECOND, -CAST(@P1 / 1000 AS int), @now));

DELETE TOP (@P2)
FROM dbo.outbox_ops WITH (READPAST, ROWLOCK)
WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded')
  AND state <> 'dead'
  AND finished_at < @before;

SELECT CAST(@@ROWCOUNT AS bigint) AS affected;
