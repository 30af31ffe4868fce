-- Baseline completion: the claimed ops delivered and their attempt rows written, in one
-- transaction, as op_complete_batch_if_claimed.sql writes them but with no lease or claim
-- check beyond "still in flight". Each attempt's start is the claim time, read with an update
-- lock before the UPDATE clears it (Babelfish for PostgreSQL returns NULL for deleted.* in an
-- UPDATE's OUTPUT).
-- Parameters: @P1 the op row ids (nvarchar, a JSON array of bigint), @P2 the token that
-- claimed them (bigint).
SET NOCOUNT ON;
SET XACT_ABORT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

DECLARE @done TABLE (
    op_id uniqueidentifier NOT NULL PRIMARY KEY,
    attempt int NOT NULL,
    started_at datetimeoffset(7) NOT NULL
);

BEGIN TRANSACTION;

INSERT INTO @done (op_id, attempt, started_at)
SELECT o.op_id, o.attempts, o.claimed_at
FROM dbo.outbox_ops AS o WITH (UPDLOCK, ROWLOCK)
WHERE o.id IN (SELECT j.id FROM OPENJSON(@P1) WITH (id bigint '$') AS j)
  AND o.state = 'in_flight';

UPDATE o
SET state = 'delivered',
    claimed_by_fence = NULL,
    claimed_at = NULL,
    delivered_at = @now,
    finished_at = @now,
    last_error = NULL
FROM dbo.outbox_ops AS o, @done AS d
WHERE d.op_id = o.op_id;

INSERT INTO dbo.outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at,
                                 outcome, http_status)
SELECT d.op_id, d.attempt, @P2, d.started_at, @now, 'delivered', 204
FROM @done AS d;

COMMIT TRANSACTION;
