-- outboxctl replay: ops back to pending, due now, with a fresh retry budget (0002_admin.sql);
-- the attempt history and the idempotency key are kept. Only ops admin_op_lock.sql read and
-- admin.rs allowed.
-- Parameters: ?1 op row ids (a JSON array).
UPDATE outbox_ops
SET state = 'pending',
    next_attempt_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    claimed_by_fence = NULL,
    claimed_by_lease = NULL,
    claimed_at = NULL,
    delivered_at = NULL,
    finished_at = NULL,
    retry_base_attempts = attempts,
    retry_since = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE id IN (SELECT value FROM json_each(?1))
