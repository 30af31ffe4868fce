-- supersede_pending: pending ops of older tokens for the same resource and destination become
-- superseded and are never sent (G5): their queue rows become finished rows. Runs in the
-- accepting op's transaction (and savepoint). A transaction script: the delete repeats the
-- insert's condition, which nothing between them changes. Finds the resource's requests by
-- outbox_ops_resource_idx.
-- Parameters: ?1 resource, ?2 destination, ?3 token of the accepted op.
INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                             retry_base_attempts, retry_since, last_attempt_trace)
SELECT q.id, 'superseded', q.attempts, q.next_attempt_at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
       'superseded by token ' || ?3, q.retry_base_attempts, q.retry_since, q.last_attempt_trace
FROM outbox_requests r
JOIN outbox_queue q ON q.id = r.id
WHERE r.resource = ?1
  AND q.destination = ?2
  AND q.fence < ?3
  AND q.claimed_by_fence IS NULL;

DELETE FROM outbox_queue
WHERE id IN (SELECT q.id
             FROM outbox_requests r
             JOIN outbox_queue q ON q.id = r.id
             WHERE r.resource = ?1
               AND q.destination = ?2
               AND q.fence < ?3
               AND q.claimed_by_fence IS NULL)
