-- Give back a claim that was never attempted (the destination was full or rate limited, or
-- the lease window closed before sending): pending again, due now, its attempt not counted
-- (the queue row only, as the claim wrote it).
-- Only while this partition lease and token still hold the claim and the lease still has this
-- owner and token, as every completion checks (G9); a new leader's re-queue wins.
-- Parameters: ?1 partition lease resource, ?2 owner id, ?3 dispatcher token, ?4 op row id.
UPDATE outbox_queue
SET claimed_by_fence = NULL,
    claimed_by_lease = NULL,
    claimed_at = NULL,
    attempts = attempts - 1
WHERE id = ?4
  AND claimed_by_fence = ?3
  AND claimed_by_lease = ?1
  AND EXISTS (
        SELECT 1 FROM outbox_leases
        WHERE resource = ?1 AND owner_id = ?2 AND fence = ?3)
