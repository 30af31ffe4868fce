-- The lease row of a resource, share-locked until the end of the transaction.
-- G4: FOR SHARE conflicts with the acquisition's UPDATE, so a takeover cannot commit while
-- this transaction holds the row, and a takeover already under way makes this wait and then
-- see the new owner. (A plain read or FOR KEY SHARE lets a stale enqueue commit after a
-- takeover: observed on PostgreSQL 15.)
-- Parameters: $1 resource. Returns (owner_id, fence, live) or no row.
SELECT owner_id, fence, (expires_at > clock_timestamp()) AS live
FROM outbox_leases
WHERE resource = $1
FOR SHARE
