-- outboxctl cancel: ops that are never sent afterwards (G5). Only ops admin_op_lock.sql locked
-- and admin.rs allowed (pending or dead).
-- Parameters: $1 op row ids (bigint[]), $2 the note kept as last_error (who and why).
UPDATE outbox_ops
SET state = 'cancelled',
    finished_at = clock_timestamp(),
    last_error = $2
WHERE id = ANY($1::bigint[])
