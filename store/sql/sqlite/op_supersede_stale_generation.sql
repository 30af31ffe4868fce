-- expire_with_generation: pending ops whose token is no longer the newest of their resource
-- become superseded and are never sent (G5): their queue rows become finished rows. The claim
-- skips them too, atomically. Only the partition's current leader marks them (G9): the lease
-- is checked here too. Finds the flagged ops by outbox_queue_generation_idx (its predicate
-- word for word). A transaction script, run in the claim's BEGIN IMMEDIATE transaction: the
-- delete takes the queue rows whose finished row the insert just wrote.
-- Parameters: ?1 partition lease resource, ?2 owner id, ?3 token, ?4 partition count,
-- ?5 partition index.
-- Returns one row per op superseded.
INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                             retry_base_attempts, retry_since, last_attempt_trace)
SELECT q.id, 'superseded', q.attempts, q.next_attempt_at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
       'token ' || q.fence || ' is no longer the newest of its resource',
       q.retry_base_attempts, q.retry_since, q.last_attempt_trace
FROM outbox_queue q
JOIN outbox_requests r ON r.id = q.id
WHERE q.expire_with_generation = 1
  AND q.claimed_by_fence IS NULL
  AND q.partition % ?4 = ?5
  AND q.fence < (SELECT l.fence FROM outbox_leases l WHERE l.resource = r.resource)
  AND EXISTS (
        SELECT 1 FROM outbox_leases
        WHERE resource = ?1 AND owner_id = ?2 AND fence = ?3
          AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
RETURNING id;

DELETE FROM outbox_queue
WHERE expire_with_generation = 1
  AND EXISTS (SELECT 1 FROM outbox_finished f WHERE f.id = outbox_queue.id)
