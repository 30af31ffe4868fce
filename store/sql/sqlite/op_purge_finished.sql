-- Retention: delete up to ?2 ops that finished (delivered, cancelled, superseded) more than ?1
-- milliseconds ago, with their attempts (ON DELETE CASCADE). Dead ops stay for operators.
-- Parameters: ?1 age in milliseconds, ?2 batch size.
DELETE FROM outbox_ops
WHERE id IN (
    SELECT id FROM outbox_ops
    -- The first term repeats the partial index's predicate word for word, so SQLite uses it.
    WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded')
      AND state <> 'dead'
      AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?1 / 1000.0))
    LIMIT ?2
)
  -- Repeated on the rows deleted, as in the PostgreSQL file; one writer makes it moot here
  -- (the subquery and the delete see one state), but the rule is the same everywhere.
  AND state IN ('delivered', 'cancelled', 'superseded')
  AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?1 / 1000.0))
