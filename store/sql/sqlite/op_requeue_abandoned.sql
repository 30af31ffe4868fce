-- On becoming leader of a partition: ops left in flight by an older dispatcher token go back
-- to pending, due now (G6). They may have been sent: delivery is at-least-once, and the next
-- attempt carries the same idempotency key (G7). Only while this dispatcher holds the lease.
-- Scans the queue (no index covers the claim columns), as attempt_record_abandoned.sql does.
-- Parameters: ?1 partition lease resource, ?2 owner id, ?3 token, ?4 partition count,
-- ?5 partition index.
UPDATE outbox_queue AS q
SET claimed_by_fence = NULL,
    claimed_by_lease = NULL,
    claimed_at = NULL,
    next_attempt_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    last_error = 'dispatcher token ' || claimed_by_fence || ' lost its lease during the attempt'
WHERE q.claimed_by_fence IS NOT NULL
  AND q.partition % ?4 = ?5
  -- Left by a claim whose lease is no longer live under its token: an older holder of this
  -- partition, or of a lease of another partition count that has lapsed. A claim of a live
  -- lease (this one's, or another dispatcher's still serving) is never taken (G12).
  AND NOT EXISTS (
        SELECT 1 FROM outbox_leases h
        WHERE h.resource = q.claimed_by_lease AND h.fence = q.claimed_by_fence
          AND h.owner_id IS NOT NULL AND h.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
  AND EXISTS (
        SELECT 1 FROM outbox_leases
        WHERE resource = ?1 AND owner_id = ?2 AND fence = ?3
          AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
