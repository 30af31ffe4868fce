-- supersede_pending: pending ops of older tokens for the same resource and destination become
-- superseded and are never sent (G5). Runs in the accepting op's transaction.
-- Parameters: $1 resource, $2 destination, $3 token of the accepted op.
UPDATE outbox_ops
SET state = 'superseded',
    finished_at = clock_timestamp(),
    last_error = 'superseded by token ' || $3::bigint
WHERE resource = $1
  AND destination = $2
  AND fence < $3
  AND state = 'pending'
