-- outboxctl purge (and --dry-run): how many finished ops of the given states finished before
-- the cut-off, per state.
-- Parameters: ?1 states (a JSON array; terminal states only, checked by admin.rs), ?2 age in ms.
-- The first term repeats outbox_ops_finished_idx's predicate word for word, so SQLite uses it.
SELECT state, count(*) AS ops
FROM outbox_ops
WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded')
  AND state IN (SELECT value FROM json_each(?1))
  AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?2 / 1000.0))
GROUP BY state
