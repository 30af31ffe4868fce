-- The lease row of a resource, read after an enqueue inserted nothing to tell why: the lease
-- is another owner's, expired or never taken (the insert's own check was atomic; a lost lease
-- never comes back to the same owner and token, so this read cannot contradict it), or, when
-- it is still held, the key existed.
-- Parameters: $1 resource. Returns (owner_id, fence, live) or no row.
SELECT owner_id, fence, (expires_at > clock_timestamp()) AS live
FROM outbox_leases
WHERE resource = $1
