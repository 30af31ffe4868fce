-- outboxctl purge (and --dry-run): how many finished ops of the given states finished before
-- the cut-off, per state, from outbox_finished (0013_queue_layout.sql), by finish time
-- (IX_outbox_finished_at).
-- A plain read for operators: a statement snapshot under READ COMMITTED SNAPSHOT, short
-- shared locks under READ COMMITTED; the purge itself re-checks every row it deletes.
-- Time is SYSUTCDATETIME(), read once (the database clock). admin.rs clamps the age to
-- MAX_AGE_MS (about 63 years: older than every row), and it is split into seconds and
-- milliseconds, so DATEADD's int arguments never overflow.
-- Parameters: @P1 states (nvarchar, a JSON array of state names; terminal states only,
-- checked by admin/change.rs), @P2 age in milliseconds (bigint).
-- Returns state (varchar), ops (bigint), one row per state with ops.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @before datetimeoffset(7) =
    DATEADD(MILLISECOND, -CAST(@P2 % 1000 AS int), DATEADD(SECOND, -CAST(@P2 / 1000 AS int), @now));

SELECT state, COUNT_BIG(*) AS ops
FROM dbo.outbox_finished
WHERE state IN (SELECT CAST(j.value AS varchar(16)) AS state FROM OPENJSON(@P1) AS j)
  AND finished_at < @before
GROUP BY state;
