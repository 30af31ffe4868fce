-- Baseline claim: SQL Server's queue idiom with none of the outbox's checks (no partition
-- lease, no partitions, no destinations, no order keys, no generations): the oldest due
-- unclaimed queue rows (0013_queue_layout.sql), rows another transaction has locked skipped
-- (READPAST), update-locked as they are read, claimed in the same transaction (an UPDATE of
-- the ids a TOP ... ORDER BY subquery chose: Babelfish runs no updatable CTE), and returned
-- with what a delivery needs, read from their requests. The CHECK on the queue wants a claim
-- time beside every token.
-- Parameters: @P1 how many at most (bigint), @P2 the token recorded (bigint).
-- Returns the claimed ops: id, op_id, destination, idempotency_key, method, path, headers,
-- content_type, body, attempts, claimed_at.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @claimed TABLE (
    id          bigint            NOT NULL PRIMARY KEY,
    attempts    int               NOT NULL,
    claimed_at  datetimeoffset(7) NOT NULL
);

BEGIN TRANSACTION;

UPDATE dbo.outbox_queue WITH (READPAST, ROWLOCK)
SET claimed_by_fence = @P2,
    claimed_at = @now,
    attempts = attempts + 1
OUTPUT inserted.id, inserted.attempts, inserted.claimed_at
INTO @claimed (id, attempts, claimed_at)
WHERE claimed_by_fence IS NULL
  AND id IN (
    SELECT TOP (@P1) q.id
    FROM dbo.outbox_queue AS q WITH (READPAST, UPDLOCK, ROWLOCK)
    WHERE q.claimed_by_fence IS NULL
      AND q.next_attempt_at <= @now
    ORDER BY q.next_attempt_at, q.id
);

SELECT c.id,
       r.op_id,
       r.destination,
       r.idempotency_key,
       r.method,
       r.path,
       r.headers,
       r.content_type,
       r.body,
       c.attempts,
       c.claimed_at
FROM @claimed AS c
INNER JOIN dbo.outbox_requests AS r ON r.id = c.id;

COMMIT TRANSACTION;
