-- outboxctl purge: delete one batch of finished ops of the given states that finished before
-- the cut-off: their finished rows here, then their requests (op_request_delete.sql, in the
-- same BEGIN IMMEDIATE transaction) and with those their attempts (ON DELETE CASCADE). Uses
-- outbox_finished_at_idx.
-- Parameters: ?1 states (a JSON array; terminal states only, checked by admin.rs), ?2 age in
-- ms, ?3 batch size. Returns the row id and state of each deleted op.
DELETE FROM outbox_finished
WHERE id IN (
    SELECT id FROM outbox_finished
    WHERE state IN (SELECT value FROM json_each(?1))
      AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?2 / 1000.0))
    LIMIT ?3
)
  -- Repeated on the rows deleted, as in the PostgreSQL file (G6).
  AND state IN (SELECT value FROM json_each(?1))
  AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?2 / 1000.0))
RETURNING state, id
