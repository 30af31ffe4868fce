-- Record the end of an attempt: delivered, retry later (pending again) or dead (G6, G9).
-- Applies only while the op is in flight under this dispatcher token and the partition lease
-- still has this owner and token (share-locked: no takeover commits under it); otherwise it
-- changes nothing and the completion is discarded.
-- Parameters: $1 op row id, $2 dispatcher token, $3 partition lease resource, $4 owner id,
-- $5 new state ('delivered' | 'pending' | 'dead'), $6 retry delay in milliseconds,
-- $7 last error (NULL when delivered).
-- Returns (op_id, attempts) when applied.
UPDATE outbox_ops o
SET state = $5,
    claimed_by_fence = NULL,
    claimed_at = NULL,
    next_attempt_at = CASE WHEN $5 = 'pending'
                           THEN clock_timestamp() + $6::bigint * interval '1 millisecond'
                           ELSE o.next_attempt_at END,
    delivered_at = CASE WHEN $5 = 'delivered' THEN clock_timestamp() ELSE o.delivered_at END,
    finished_at = CASE WHEN $5 IN ('delivered', 'dead') THEN clock_timestamp() ELSE NULL END,
    last_error = $7
WHERE o.id = $1
  AND o.state = 'in_flight'
  AND o.claimed_by_fence = $2
  AND EXISTS (
        SELECT 1 FROM outbox_leases l
        WHERE l.resource = $3 AND l.owner_id = $4 AND l.fence = $2
        FOR SHARE)
RETURNING o.op_id, o.attempts
