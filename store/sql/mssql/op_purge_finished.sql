-- Retention: delete up to @P2 ops that finished (delivered, cancelled, superseded) more than
-- @P1 milliseconds ago: their finished rows, then their requests, with their attempts (ON
-- DELETE CASCADE from the requests' op_id), in one transaction (0013_queue_layout.sql). Dead
-- ops stay for operators. The first DELETE finds its rows by IX_outbox_finished_at WITH
-- (READPAST, ROWLOCK): a row locked by a concurrent change (an operator's replay) is skipped,
-- never waited for, and the others are taken with update locks and checked on the current
-- row, under READ COMMITTED and READ COMMITTED SNAPSHOT alike, so one changed meanwhile is
-- re-checked as it is now, never deleted for what it was (G6). A request goes only with the
-- finished row this transaction deleted (held exclusively to the commit), so a replayed op's
-- request, whose queue row replaced its finished row, is never deleted.
-- Time is SYSUTCDATETIME(), the database clock; @P1 (at most 3650 days by configuration) is
-- split into seconds and milliseconds so DATEADD's int argument never overflows.
-- Parameters: @P1 age in milliseconds (bigint), @P2 batch size (bigint).
-- Returns one row: affected (bigint), how many ops were deleted (their attempts not counted).
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @before datetimeoffset(7) =
    DATEADD(MILLISECOND, -CAST(@P1 % 1000 AS int), DATEADD(SECOND, -CAST(@P1 / 1000 AS int), @now));
DECLARE @gone TABLE (id bigint NOT NULL PRIMARY KEY);

BEGIN TRANSACTION;

DELETE TOP (@P2)
FROM dbo.outbox_finished WITH (READPAST, ROWLOCK)
OUTPUT deleted.id INTO @gone (id)
WHERE state <> 'dead'
  AND finished_at < @before;

DELETE FROM dbo.outbox_requests
WHERE id IN (SELECT g.id FROM @gone AS g);

COMMIT TRANSACTION;

SELECT CAST(COUNT_BIG(*) AS bigint) AS affected FROM @gone;
