-- Retention: delete up to ?2 ops that finished (delivered, cancelled, superseded) more than ?1
-- milliseconds ago: their finished rows here, then their requests (op_request_delete.sql, in
-- the same BEGIN IMMEDIATE transaction) and with those their attempts (ON DELETE CASCADE).
-- Dead ops stay for operators. Uses outbox_finished_at_idx.
-- Parameters: ?1 age in milliseconds, ?2 batch size.
-- Returns the row id of each op deleted.
DELETE FROM outbox_finished
WHERE id IN (
    SELECT id FROM outbox_finished
    WHERE state <> 'dead'
      AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?1 / 1000.0))
    LIMIT ?2
)
  -- Repeated on the rows deleted, as in the PostgreSQL file; one writer makes it moot here
  -- (the subquery and the delete see one state), but the rule is the same everywhere.
  AND state <> 'dead'
  AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?1 / 1000.0))
RETURNING id
