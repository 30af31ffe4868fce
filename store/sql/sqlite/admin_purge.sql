-- outboxctl purge: delete one batch of finished ops of the given states that finished before
-- the cut-off, with their attempts (ON DELETE CASCADE). Uses outbox_ops_finished_idx.
-- Parameters: ?1 states (a JSON array; terminal states only, checked by admin.rs), ?2 age in
-- ms, ?3 batch size. Returns the states of the deleted ops.
DELETE FROM outbox_ops
WHERE id IN (
    SELECT id FROM outbox_ops
    WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded')
      AND state IN (SELECT value FROM json_each(?1))
      AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?2 / 1000.0))
    LIMIT ?3
)
  -- Repeated on the rows deleted, as in the PostgreSQL file (G6).
  AND state IN (SELECT value FROM json_each(?1))
  AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?2 / 1000.0))
RETURNING state
