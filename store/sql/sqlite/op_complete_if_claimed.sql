-- Record the end of an attempt: delivered, retry later (pending again) or dead (G6, G9).
-- Applies only while the op is in flight under this partition lease and token, and the lease
-- still has this owner and token; otherwise it changes nothing and the completion is
-- discarded. Runs in a BEGIN IMMEDIATE transaction with the attempt's row.
-- Parameters: ?1 op row id, ?2 dispatcher token, ?3 partition lease resource, ?4 owner id,
-- ?5 new state ('delivered' | 'pending' | 'dead'), ?6 retry delay in milliseconds,
-- ?7 last error (NULL when delivered), ?8 the attempt's span traceparent (a retry's span links
-- to it).
-- Returns (op_id, attempts) when applied.
UPDATE outbox_ops
SET state = ?5,
    claimed_by_fence = NULL,
    claimed_by_lease = NULL,
    claimed_at = NULL,
    next_attempt_at = CASE WHEN ?5 = 'pending'
                           THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', ?6 / 1000.0))
                           ELSE next_attempt_at END,
    delivered_at = CASE WHEN ?5 = 'delivered' THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') ELSE delivered_at END,
    finished_at = CASE WHEN ?5 IN ('delivered', 'dead') THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') ELSE NULL END,
    last_error = ?7,
    last_attempt_trace = ?8
WHERE id = ?1
  AND state = 'in_flight'
  AND claimed_by_fence = ?2
  AND claimed_by_lease = ?3
  AND EXISTS (
        SELECT 1 FROM outbox_leases l
        WHERE l.resource = ?3 AND l.owner_id = ?4 AND l.fence = ?2)
RETURNING op_id, attempts
