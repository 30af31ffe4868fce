-- expire_with_generation: pending ops whose token is no longer the newest of their resource
-- become superseded and are never sent (G5). The claim skips them too, atomically. Only the
-- partition's current leader marks them (G9): the lease is checked and share-locked here too.
-- Parameters: $1 partition lease resource, $2 owner id, $3 token, $4 partition count,
-- $5 partition index.
UPDATE outbox_ops o
SET state = 'superseded',
    finished_at = clock_timestamp(),
    last_error = 'token ' || o.fence || ' is no longer the newest of its resource'
WHERE o.state = 'pending'
  AND o.expire_with_generation
  AND o.partition % $4 = $5
  AND o.fence < (SELECT l.fence FROM outbox_leases l WHERE l.resource = o.resource)
  AND EXISTS (
        SELECT 1 FROM outbox_leases
        WHERE resource = $1 AND owner_id = $2 AND fence = $3 AND expires_at > clock_timestamp()
        FOR SHARE)
