-- outboxctl cancel: ops that are never sent afterwards (G5). Only ops admin_op_lock.sql locked
-- and admin.rs allowed (pending or dead): a pending op's queue row becomes a cancelled
-- finished row; a dead op's finished row is marked cancelled (the statement's UPDATE does not
-- see the rows its own INSERT adds).
-- Parameters: $1 op row ids (bigint[]), $2 the note kept as last_error (who and why).
WITH pending AS (
    DELETE FROM outbox_queue
    WHERE id = ANY($1::bigint[])
      AND claimed_by_fence IS NULL
    RETURNING id, attempts, next_attempt_at, retry_base_attempts, retry_since,
              last_attempt_trace
), cancelled AS (
    INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                                 retry_base_attempts, retry_since, last_attempt_trace)
    SELECT id, 'cancelled', attempts, next_attempt_at, clock_timestamp(), $2,
           retry_base_attempts, retry_since, last_attempt_trace
    FROM pending
)
UPDATE outbox_finished
SET state = 'cancelled',
    finished_at = clock_timestamp(),
    last_error = $2
WHERE id = ANY($1::bigint[])
  AND state = 'dead'
