-- supersede_pending: pending ops of older tokens for the same resource and destination become
-- superseded and are never sent (G5): their queue rows become finished rows. Runs in the
-- accepting op's transaction. Finds the resource's requests by outbox_ops_resource_idx.
-- Parameters: $1 resource, $2 destination, $3 token of the accepted op.
WITH gone AS (
    DELETE FROM outbox_queue q
    USING outbox_requests r
    WHERE r.id = q.id
      AND r.resource = $1
      AND q.destination = $2
      AND q.fence < $3
      AND q.claimed_by_fence IS NULL
    RETURNING q.id, q.attempts, q.next_attempt_at, q.retry_base_attempts, q.retry_since,
              q.last_attempt_trace
)
INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                             retry_base_attempts, retry_since, last_attempt_trace)
SELECT id, 'superseded', attempts, next_attempt_at, clock_timestamp(),
       'superseded by token ' || $3::bigint, retry_base_attempts, retry_since, last_attempt_trace
FROM gone
