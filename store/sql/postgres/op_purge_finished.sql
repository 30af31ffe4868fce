-- Retention: delete up to $2 ops that finished (delivered, cancelled, superseded) more than $1
-- milliseconds ago, with their requests and attempts in the same statement. Dead ops stay for
-- operators. The conditions are repeated on the rows deleted: a row locked by a concurrent
-- change (an operator's replay) is skipped, and one changed meanwhile is re-checked as it is
-- now, never deleted for what it was (G6). Uses outbox_finished_at_idx.
-- Parameters: $1 age in milliseconds, $2 batch size.
-- Returns one row per op deleted.
WITH gone AS (
    DELETE FROM outbox_finished
    WHERE id IN (
            SELECT id FROM outbox_finished
            WHERE state <> 'dead'
              AND finished_at < clock_timestamp() - $1::bigint * interval '1 millisecond'
            LIMIT $2
            FOR UPDATE SKIP LOCKED)
      AND state <> 'dead'
      AND finished_at < clock_timestamp() - $1::bigint * interval '1 millisecond'
    RETURNING id
), requests AS (
    DELETE FROM outbox_requests r
    USING gone
    WHERE r.id = gone.id
    RETURNING r.op_id
), attempts AS (
    DELETE FROM outbox_attempts a
    USING requests
    WHERE a.op_id = requests.op_id
)
SELECT op_id FROM requests
