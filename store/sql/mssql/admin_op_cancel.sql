-- outboxctl cancel: ops that are never sent afterwards (G5). Only ops admin_op_lock.sql locked
-- and admin.rs allowed (pending or dead), inside the same transaction: their queue or finished
-- rows are still held WITH (UPDLOCK, HOLDLOCK) from there, under READ COMMITTED and READ
-- COMMITTED SNAPSHOT alike (a locking read, never a version), so no claim took them meanwhile
-- and these statements convert those locks to exclusive ones, held to the commit.
-- A dead op's finished row is marked cancelled (the one update of a finished row, an
-- operator's); a pending op's unclaimed queue row becomes a cancelled finished row
-- (0013_queue_layout.sql). The UPDATE runs first, so it never sees the rows the INSERT adds.
-- Time is SYSUTCDATETIME(), the database clock. admin.rs cuts the note to ERROR_MAX_CHARS
-- (2048) characters, as every last_error is cut, and last_error is nvarchar(max).
-- Parameters: @P1 op row ids (nvarchar, a JSON array of numbers), @P2 the note kept as
-- last_error (who and why).
-- Returns nothing.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @ids TABLE (id bigint NOT NULL PRIMARY KEY);
DECLARE @gone TABLE (
    id                  bigint            NOT NULL PRIMARY KEY,
    attempts            int               NOT NULL,
    next_attempt_at     datetimeoffset(7) NOT NULL,
    retry_base_attempts int               NOT NULL,
    retry_since         datetimeoffset(7) NULL,
    last_attempt_trace  varchar(55)       NULL
);

INSERT INTO @ids (id)
SELECT DISTINCT CAST(j.value AS bigint) FROM OPENJSON(@P1) AS j;

UPDATE dbo.outbox_finished
SET state = 'cancelled',
    finished_at = @now,
    last_error = @P2
WHERE state = 'dead'
  AND id IN (SELECT i.id FROM @ids AS i);

DELETE FROM dbo.outbox_queue
OUTPUT deleted.id, deleted.attempts, deleted.next_attempt_at, deleted.retry_base_attempts,
       deleted.retry_since, deleted.last_attempt_trace
INTO @gone (id, attempts, next_attempt_at, retry_base_attempts, retry_since, last_attempt_trace)
WHERE claimed_by_fence IS NULL
  AND id IN (SELECT i.id FROM @ids AS i);

INSERT INTO dbo.outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                                 retry_base_attempts, retry_since, last_attempt_trace)
SELECT g.id, 'cancelled', g.attempts, g.next_attempt_at, @now, @P2, g.retry_base_attempts,
       g.retry_since, g.last_attempt_trace
FROM @gone AS g;
