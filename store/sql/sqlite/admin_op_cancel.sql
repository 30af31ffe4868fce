-- outboxctl cancel: ops that are never sent afterwards (G5). Only ops admin_op_lock.sql read
-- and admin.rs allowed (pending or dead): a dead op's finished row is marked cancelled; a
-- pending op's queue row becomes a cancelled finished row. A transaction script, in the
-- change's BEGIN IMMEDIATE transaction: the delete takes the queue rows the insert copied.
-- Parameters: ?1 op row ids (a JSON array), ?2 the note kept as last_error (who and why).
UPDATE outbox_finished
SET state = 'cancelled',
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    last_error = ?2
WHERE id IN (SELECT value FROM json_each(?1))
  AND state = 'dead';

INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                             retry_base_attempts, retry_since, last_attempt_trace)
SELECT id, 'cancelled', attempts, next_attempt_at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?2,
       retry_base_attempts, retry_since, last_attempt_trace
FROM outbox_queue
WHERE id IN (SELECT value FROM json_each(?1))
  AND claimed_by_fence IS NULL;

DELETE FROM outbox_queue
WHERE id IN (SELECT value FROM json_each(?1))
  AND claimed_by_fence IS NULL
