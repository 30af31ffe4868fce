-- expire_with_generation: pending ops whose token is no longer the newest of their resource
-- become superseded and are never sent (G5): their queue rows become finished rows. The claim
-- skips them too, atomically. Only the partition's current leader marks them (G9): the lease
-- is checked and share-locked here too. Finds the flagged ops by outbox_queue_generation_idx.
-- Parameters: $1 partition lease resource, $2 owner id, $3 token, $4 partition count,
-- $5 partition index.
WITH gone AS (
    DELETE FROM outbox_queue q
    USING outbox_requests r
    WHERE r.id = q.id
      AND q.expire_with_generation
      AND q.claimed_by_fence IS NULL
      AND q.partition % $4 = $5
      AND q.fence < (SELECT l.fence FROM outbox_leases l WHERE l.resource = r.resource)
      AND EXISTS (
            SELECT 1 FROM outbox_leases
            WHERE resource = $1 AND owner_id = $2 AND fence = $3
              AND expires_at > clock_timestamp()
            FOR SHARE)
    RETURNING q.id, q.fence, q.attempts, q.next_attempt_at, q.retry_base_attempts,
              q.retry_since, q.last_attempt_trace
)
INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                             retry_base_attempts, retry_since, last_attempt_trace)
SELECT id, 'superseded', attempts, next_attempt_at, clock_timestamp(),
       'token ' || fence || ' is no longer the newest of its resource', retry_base_attempts,
       retry_since, last_attempt_trace
FROM gone
