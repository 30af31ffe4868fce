-- expire_with_generation: pending ops whose token is no longer the newest of their resource
-- become superseded and are never sent (G5). The claim skips them too, atomically.
-- Parameters: $1 partition count, $2 partition index.
UPDATE outbox_ops o
SET state = 'superseded',
    finished_at = clock_timestamp(),
    last_error = 'token ' || o.fence || ' is no longer the newest of its resource'
WHERE o.state = 'pending'
  AND o.expire_with_generation
  AND o.partition % $1 = $2
  AND o.fence < (SELECT l.fence FROM outbox_leases l WHERE l.resource = o.resource)
