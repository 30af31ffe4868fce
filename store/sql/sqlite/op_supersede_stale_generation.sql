-- expire_with_generation: pending ops whose token is no longer the newest of their resource
-- become superseded and are never sent (G5). The claim skips them too, atomically.
-- Parameters: ?1 partition count, ?2 partition index.
UPDATE outbox_ops
SET state = 'superseded',
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    last_error = 'token ' || fence || ' is no longer the newest of its resource'
WHERE state = 'pending'
  AND expire_with_generation = 1
  AND partition % ?1 = ?2
  AND fence < (SELECT l.fence FROM outbox_leases l WHERE l.resource = outbox_ops.resource)
