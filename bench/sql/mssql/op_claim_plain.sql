-- Baseline claim: SQL Server's queue idiom with none of the outbox's checks (no partition
-- lease, no partitions, no destinations, no order keys, no generations): the oldest due
-- pending ops, rows another transaction has locked skipped (READPAST), update-locked as they
-- are read, marked in flight in the same autocommit statement (an UPDATE of the ids a TOP ... ORDER BY
-- subquery chose: Babelfish runs no updatable CTE), and returned with what a
-- delivery needs. The CHECK on claimed_by_fence wants a token on every in-flight row.
-- Parameters: @P1 how many at most (bigint), @P2 the token recorded (bigint).
-- Returns the claimed ops: id, op_id, destination, idempotency_key, method, path, headers,
-- content_type, body, attempts, claimed_at.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

UPDATE dbo.outbox_ops WITH (READPAST, ROWLOCK)
SET state = 'in_flight',
    claimed_by_fence = @P2,
    claimed_at = @now,
    attempts = attempts + 1
OUTPUT inserted.id,
       inserted.op_id,
       inserted.destination,
       inserted.idempotency_key,
       inserted.method,
       inserted.path,
       inserted.headers,
       inserted.content_type,
       inserted.body,
       inserted.attempts,
       inserted.claimed_at
WHERE state = 'pending'
  AND id IN (
    SELECT TOP (@P1) o.id
    FROM dbo.outbox_ops AS o WITH (READPAST, UPDLOCK, ROWLOCK)
    WHERE o.state = 'pending'
      AND o.next_attempt_at <= @now
    ORDER BY o.next_attempt_at, o.id
);
