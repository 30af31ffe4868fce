-- outboxctl replay: finished ops back to pending, due now, with a fresh retry budget
-- (0002_admin.sql): the finished row becomes a queue row again (0013_queue_layout.sql); the
-- attempt history and the idempotency key are kept. Only ops admin_op_lock.sql locked and
-- admin.rs allowed, inside the same transaction: their finished rows are still held WITH
-- (UPDLOCK, HOLDLOCK) from there, and the key range of their ids in the queue too, under READ
-- COMMITTED and READ COMMITTED SNAPSHOT alike (a locking read, never a version); the DELETE
-- converts those locks to exclusive ones, held to the commit. SQL Server has no LISTEN:
-- dispatchers poll, and claim the ops on their next cycle.
-- Time is SYSUTCDATETIME(), read once (the database clock, G2).
-- The replayed attempt's span links to the op's last attempt: its traceparent is the finished
-- row's when kept there (a cancelled or superseded op's), otherwise its newest attempt row's
-- (a completion writes it on the attempt row only: one copy, not two).
-- Parameters: @P1 op row ids (nvarchar, a JSON array of numbers).
-- Returns one row: replayed (bigint), how many were replayed.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @gone TABLE (
    id                  bigint            NOT NULL PRIMARY KEY,
    attempts            int               NOT NULL,
    last_error          nvarchar(max)     NULL,
    last_attempt_trace  varchar(55)       NULL
);

DELETE FROM dbo.outbox_finished
OUTPUT deleted.id, deleted.attempts, deleted.last_error, deleted.last_attempt_trace
INTO @gone (id, attempts, last_error, last_attempt_trace)
WHERE id IN (SELECT CAST(j.value AS bigint) AS id FROM OPENJSON(@P1) AS j);

INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation, attempts, retry_base_attempts,
                              retry_since, last_error, last_attempt_trace)
SELECT g.id, @now, r.partition, r.destination, r.fence, r.order_key, r.expire_with_generation,
       g.attempts, g.attempts, @now, g.last_error,
       COALESCE(g.last_attempt_trace,
                (SELECT TOP (1) a.trace_context FROM dbo.outbox_attempts AS a
                 WHERE a.op_id = r.op_id
                 ORDER BY a.attempt DESC))
FROM @gone AS g
INNER JOIN dbo.outbox_requests AS r ON r.id = g.id;

SELECT CAST(COUNT_BIG(*) AS bigint) AS replayed FROM @gone;
