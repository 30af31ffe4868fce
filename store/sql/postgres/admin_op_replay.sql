-- outboxctl replay: ops back to pending, due now, with a fresh retry budget (0002_admin.sql);
-- the attempt history and the idempotency key are kept. Only ops admin_op_lock.sql locked and
-- admin.rs allowed. Wakes listening dispatchers on commit (one notification per transaction:
-- PostgreSQL folds identical ones).
-- Parameters: $1 op row ids (bigint[]). Returns how many were replayed.
WITH replayed AS (
    UPDATE outbox_ops
    SET state = 'pending',
        next_attempt_at = clock_timestamp(),
        claimed_by_fence = NULL,
        claimed_by_lease = NULL,
        claimed_at = NULL,
        delivered_at = NULL,
        finished_at = NULL,
        retry_base_attempts = attempts,
        retry_since = clock_timestamp()
    WHERE id = ANY($1::bigint[])
    RETURNING id
)
SELECT count(pg_notify('outbox_ops', 'replay')) AS replayed
FROM replayed
