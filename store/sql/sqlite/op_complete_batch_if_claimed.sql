-- Record the ends of many attempts in one script (the recorder's batch, G6, G9): each op gets
-- its attempt row; a delivered or dead op's queue row becomes its finished row; a retried op's
-- queue row gets its new due time and gives up its claim (0013_queue_layout.sql). Each applies
-- only while the op is claimed under this partition lease and token, and the lease still has
-- this owner and token; the others change nothing. Run in a BEGIN IMMEDIATE transaction (one
-- writer): the attempt rows are written first, under the same test the changes below apply
-- by, so an attempt is recorded exactly for the completions that apply; a queue row is deleted
-- only once its finished row exists (an op is never in both).
-- Parameters: ?1 partition lease resource, ?2 owner id, ?3 dispatcher token, ?4 the
-- completions (JSON array, one object per op, no op twice): seq (op row id), state
-- ('delivered' | 'pending' | 'dead'), delay_ms (a retry's delay), error (NULL when delivered),
-- attempt (its number), started_at (the claim's database time), outcome ('delivered' |
-- 'failed' | 'unknown'), http_status, excerpt, trace (the attempt's span traceparent: a
-- retry's span links to it).
-- Returns the row ids that applied (from the finished rows' insert and the retries' update).
INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at,
                             outcome, http_status, error, response_excerpt, trace_context)
SELECT r.op_id, json_extract(c.value, '$.attempt'), ?3,
       json_extract(c.value, '$.started_at'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
       json_extract(c.value, '$.outcome'), json_extract(c.value, '$.http_status'),
       json_extract(c.value, '$.error'), json_extract(c.value, '$.excerpt'),
       json_extract(c.value, '$.trace')
FROM json_each(?4) AS c
JOIN outbox_queue AS q ON q.id = json_extract(c.value, '$.seq')
JOIN outbox_requests AS r ON r.id = q.id
WHERE q.claimed_by_fence = ?3
  AND q.claimed_by_lease = ?1
  AND EXISTS (
        SELECT 1 FROM outbox_leases l
        WHERE l.resource = ?1 AND l.owner_id = ?2 AND l.fence = ?3)
ON CONFLICT (op_id, attempt) DO NOTHING;

INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                             retry_base_attempts, retry_since)
SELECT q.id, json_extract(c.value, '$.state'), q.attempts, q.next_attempt_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), json_extract(c.value, '$.error'),
       q.retry_base_attempts, q.retry_since
FROM json_each(?4) AS c
JOIN outbox_queue AS q ON q.id = json_extract(c.value, '$.seq')
WHERE json_extract(c.value, '$.state') IN ('delivered', 'dead')
  AND q.claimed_by_fence = ?3
  AND q.claimed_by_lease = ?1
  AND EXISTS (
        SELECT 1 FROM outbox_leases l
        WHERE l.resource = ?1 AND l.owner_id = ?2 AND l.fence = ?3)
RETURNING id;

DELETE FROM outbox_queue
WHERE id IN (SELECT json_extract(c.value, '$.seq') FROM json_each(?4) AS c
             WHERE json_extract(c.value, '$.state') IN ('delivered', 'dead'))
  AND EXISTS (SELECT 1 FROM outbox_finished f WHERE f.id = outbox_queue.id);

UPDATE outbox_queue
SET claimed_by_fence = NULL,
    claimed_by_lease = NULL,
    claimed_at = NULL,
    next_attempt_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now',
                               printf('%+.3f seconds',
                                      json_extract(c.value, '$.delay_ms') / 1000.0)),
    last_error = json_extract(c.value, '$.error'),
    last_attempt_trace = json_extract(c.value, '$.trace')
FROM json_each(?4) AS c
WHERE outbox_queue.id = json_extract(c.value, '$.seq')
  AND json_extract(c.value, '$.state') = 'pending'
  AND outbox_queue.claimed_by_fence = ?3
  AND outbox_queue.claimed_by_lease = ?1
  AND EXISTS (
        SELECT 1 FROM outbox_leases l
        WHERE l.resource = ?1 AND l.owner_id = ?2 AND l.fence = ?3)
RETURNING id
