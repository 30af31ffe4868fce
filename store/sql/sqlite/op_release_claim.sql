-- Give back a claim that was never attempted (the destination was full or rate limited, or
-- the lease window closed before sending): pending again, due now, its attempt not counted.
-- Only while this dispatcher token still holds the claim; a new leader's re-queue wins.
-- Parameters: ?1 op row id, ?2 dispatcher token.
UPDATE outbox_ops
SET state = 'pending',
    claimed_by_fence = NULL,
    claimed_at = NULL,
    attempts = attempts - 1
WHERE id = ?1
  AND state = 'in_flight'
  AND claimed_by_fence = ?2
