-- On becoming leader of a partition, before re-queueing: close the attempts that older
-- dispatcher tokens left open, with outcome 'unknown' (the request may have been sent).
-- Reads the partition's queue rows that carry a claim: no index covers the claim columns (so
-- that the claim writes no index entry), so this scans the queue, the unfinished ops only,
-- once per term.
-- Parameters: ?1 partition lease resource, ?2 owner id, ?3 token, ?4 partition count,
-- ?5 partition index.
INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at, outcome, error)
SELECT r.op_id, q.attempts, q.claimed_by_fence, q.claimed_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'unknown',
       'dispatcher token ' || q.claimed_by_fence || ' lost its lease during the attempt'
FROM outbox_queue q
JOIN outbox_requests r ON r.id = q.id
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
ON CONFLICT (op_id, attempt) DO NOTHING
