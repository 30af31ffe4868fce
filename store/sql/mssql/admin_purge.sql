-- outboxctl purge: delete one batch of finished ops of the given states that finished before
-- the cut-off: their finished rows, then their requests, with their attempts (ON DELETE
-- CASCADE from the requests' op_id), in one transaction (0013_queue_layout.sql). The finished
-- rows are found by finish time (IX_outbox_finished_at).
-- The first DELETE finds its rows WITH (READPAST, ROWLOCK): a row locked by a concurrent
-- change (a replay holding it from admin_op_lock.sql) is skipped, never waited for, as SKIP
-- LOCKED does on PostgreSQL; the others are taken with update locks and checked on the current
-- row, under READ COMMITTED and READ COMMITTED SNAPSHOT alike (a DELETE never decides from a
-- version), so one changed meanwhile is re-checked as it is now, never deleted for what it was
-- (G6). A request goes only with the finished row this transaction deleted.
-- Time is SYSUTCDATETIME(), read once (the database clock). admin.rs clamps the age to
-- MAX_AGE_MS (about 63 years: older than every row), and it is split into seconds and
-- milliseconds, so DATEADD's int arguments never overflow.
-- Parameters: @P1 states (nvarchar, a JSON array of state names; terminal states only,
-- checked by admin/change.rs), @P2 age in milliseconds (bigint), @P3 batch size (bigint).
-- Returns state (varchar), one row per op deleted.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @before datetimeoffset(7) =
    DATEADD(MILLISECOND, -CAST(@P2 % 1000 AS int), DATEADD(SECOND, -CAST(@P2 / 1000 AS int), @now));
DECLARE @gone TABLE (id bigint NOT NULL PRIMARY KEY, state varchar(16) NOT NULL);

BEGIN TRANSACTION;

DELETE TOP (@P3)
FROM dbo.outbox_finished WITH (READPAST, ROWLOCK)
OUTPUT deleted.id, deleted.state INTO @gone (id, state)
WHERE state IN (SELECT CAST(j.value AS varchar(16)) AS state FROM OPENJSON(@P1) AS j)
  AND finished_at < @before;

DELETE FROM dbo.outbox_requests
WHERE id IN (SELECT g.id FROM @gone AS g);

COMMIT TRANSACTION;

SELECT state FROM @gone;
