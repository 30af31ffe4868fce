-- outboxctl replay: finished ops back to pending, due now, with a fresh retry budget
-- (0002_admin.sql): the finished row becomes a queue row again; the attempt history and the
-- idempotency key are kept. Only ops admin_op_lock.sql locked and admin.rs allowed. Wakes
-- listening dispatchers on commit (one notification per transaction: PostgreSQL folds
-- identical ones).
-- Parameters: $1 op row ids (bigint[]). Returns how many were replayed.
WITH gone AS (
    DELETE FROM outbox_finished
    WHERE id = ANY($1::bigint[])
    RETURNING id, attempts, last_error, last_attempt_trace
), replayed AS (
    INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation, attempts, retry_base_attempts,
                              retry_since, last_error, last_attempt_trace)
    SELECT g.id, clock_timestamp(), r.partition, r.destination, r.fence, r.order_key,
           r.expire_with_generation, g.attempts, g.attempts, clock_timestamp(), g.last_error,
           g.last_attempt_trace
    FROM gone g
    JOIN outbox_requests r ON r.id = g.id
    RETURNING id
)
SELECT count(pg_notify('outbox_ops', 'replay')) AS replayed
FROM replayed
