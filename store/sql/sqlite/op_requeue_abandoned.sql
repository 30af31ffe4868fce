-- On becoming leader of a partition: ops left in flight by an older dispatcher token go back
-- to pending, due now (G6). They may have been sent: delivery is at-least-once, and the next
-- attempt carries the same idempotency key (G7). Only while this dispatcher holds the lease.
-- Parameters: ?1 partition lease resource, ?2 owner id, ?3 token, ?4 partition count,
-- ?5 partition index.
UPDATE outbox_ops
SET state = 'pending',
    claimed_by_fence = NULL,
    claimed_at = NULL,
    next_attempt_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    last_error = 'dispatcher token ' || claimed_by_fence || ' lost its lease during the attempt'
WHERE state = 'in_flight'
  AND claimed_by_fence <> ?3
  AND partition % ?4 = ?5
  AND EXISTS (
        SELECT 1 FROM outbox_leases
        WHERE resource = ?1 AND owner_id = ?2 AND fence = ?3
          AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
