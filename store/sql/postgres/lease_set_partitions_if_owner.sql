-- A dispatcher that took a partition lease records the partition count it serves, so that a
-- dispatcher configured with another count sees it and refuses to serve (G12). Only while
-- this owner and token hold the lease.
-- Parameters: $1 partition lease resource, $2 owner id, $3 token, $4 partition count.
UPDATE outbox_leases
SET partitions = $4
WHERE resource = $1 AND owner_id = $2 AND fence = $3
