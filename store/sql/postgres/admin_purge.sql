-- outboxctl purge: delete one batch of finished ops of the given states that finished before
-- the cut-off, with their requests and attempts in the same statement. Uses
-- outbox_finished_at_idx.
-- Parameters: $1 states (text[]; terminal states only, checked by admin.rs), $2 age in ms,
-- $3 batch size. Returns the states of the deleted ops.
-- The conditions are repeated on the rows deleted: a row locked by a concurrent change (a
-- replay) is skipped, and one changed meanwhile is re-checked as it is now (G6).
WITH gone AS (
    DELETE FROM outbox_finished
    WHERE id IN (
            SELECT id FROM outbox_finished
            WHERE state = ANY($1::text[])
              AND finished_at < clock_timestamp() - $2::bigint * interval '1 millisecond'
            LIMIT $3
            FOR UPDATE SKIP LOCKED)
      AND state = ANY($1::text[])
      AND finished_at < clock_timestamp() - $2::bigint * interval '1 millisecond'
    RETURNING id, state
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
SELECT state FROM gone
