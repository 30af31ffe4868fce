-- outboxctl cancel: ops that are never sent afterwards (G5). Only ops admin_op_lock.sql read
-- and admin.rs allowed (pending or dead).
-- Parameters: ?1 op row ids (a JSON array), ?2 the note kept as last_error (who and why).
UPDATE outbox_ops
SET state = 'cancelled',
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    last_error = ?2
WHERE id IN (SELECT value FROM json_each(?1))
