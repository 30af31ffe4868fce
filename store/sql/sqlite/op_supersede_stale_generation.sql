-- expire_with_generation: pending ops whose token is no longer the newest of their resource
-- become superseded and are never sent (G5). The claim skips them too, atomically. Only the
-- partition's current leader marks them (G9): the lease is checked here too.
-- Parameters: ?1 partition lease resource, ?2 owner id, ?3 token, ?4 partition count,
-- ?5 partition index.
UPDATE outbox_ops
SET state = 'superseded',
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    last_error = 'token ' || fence || ' is no longer the newest of its resource'
WHERE state = 'pending'
  AND expire_with_generation = 1
  AND partition % ?4 = ?5
  AND fence < (SELECT l.fence FROM outbox_leases l WHERE l.resource = outbox_ops.resource)
  AND EXISTS (
        SELECT 1 FROM outbox_leases
        WHERE resource = ?1 AND owner_id = ?2 AND fence = ?3
          AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
