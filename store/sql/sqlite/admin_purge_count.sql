-- outboxctl purge (and --dry-run): how many finished ops of the given states finished before
-- the cut-off, per state.
-- Parameters: ?1 states (a JSON array; terminal states only, checked by admin.rs), ?2 age in ms.
SELECT state, count(*) AS ops
FROM outbox_finished
WHERE state IN (SELECT value FROM json_each(?1))
  AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?2 / 1000.0))
GROUP BY state
