-- outboxctl replay: finished ops back to pending, due now, with a fresh retry budget
-- (0002_admin.sql): the finished row becomes a queue row again; the attempt history and the
-- idempotency key are kept. Only ops admin_op_lock.sql locked and admin.rs allowed. Wakes
-- listening dispatchers on commit (one notification per transaction: PostgreSQL folds
-- identical ones).
-- The replayed attempt's span links to the op's last attempt: its traceparent is the finished
-- row's when kept there (a cancelled or superseded op's), otherwise its newest attempt row's
-- (a completion writes it on the attempt row only: one copy, not two).
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
           coalesce(g.last_attempt_trace,
                    (SELECT a.trace_context FROM outbox_attempts a
                     WHERE a.op_id = r.op_id
                     ORDER BY a.attempt DESC
                     LIMIT 1))
    FROM gone g
    JOIN outbox_requests r ON r.id = g.id
    RETURNING id
)
SELECT count(pg_notify('outbox_ops', 'replay')) AS replayed
FROM replayed
