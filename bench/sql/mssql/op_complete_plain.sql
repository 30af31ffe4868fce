-- Baseline completion: the claimed ops delivered and their attempt rows written, in one
-- transaction, as op_complete_batch_if_claimed.sql writes them (queue rows deleted, finished
-- rows and attempt rows inserted, 0013_queue_layout.sql) but with no lease or claim check
-- beyond "still claimed". Each attempt's start is the claim time, kept by the DELETE's OUTPUT.
-- Parameters: @P1 the op row ids (nvarchar, a JSON array of bigint), @P2 the token that
-- claimed them (bigint).
SET NOCOUNT ON;
SET XACT_ABORT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

DECLARE @done TABLE (
    id bigint NOT NULL PRIMARY KEY,
    attempts int NOT NULL,
    next_attempt_at datetimeoffset(7) NOT NULL,
    started_at datetimeoffset(7) NOT NULL
);

BEGIN TRANSACTION;

DELETE FROM dbo.outbox_queue
OUTPUT deleted.id, deleted.attempts, deleted.next_attempt_at, deleted.claimed_at
INTO @done (id, attempts, next_attempt_at, started_at)
WHERE id IN (SELECT j.id FROM OPENJSON(@P1) WITH (id bigint '$') AS j)
  AND claimed_by_fence IS NOT NULL;

INSERT INTO dbo.outbox_finished (id, state, attempts, next_attempt_at, finished_at)
SELECT d.id, 'delivered', d.attempts, d.next_attempt_at, @now
FROM @done AS d;

INSERT INTO dbo.outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at,
                                 outcome, http_status)
SELECT r.op_id, d.attempts, @P2, d.started_at, @now, 'delivered', 204
FROM @done AS d
INNER JOIN dbo.outbox_requests AS r ON r.id = d.id;

COMMIT TRANSACTION;
