-- outboxctl purge (and --dry-run): how many finished ops of the given states finished before
-- the cut-off, per state.
-- Parameters: $1 states (text[]; terminal states only, checked by admin.rs), $2 age in ms.
-- The first term repeats outbox_ops_finished_idx's predicate word for word, for SQLite's sake.
SELECT state, count(*) AS ops
FROM outbox_ops
WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded')
  AND state = ANY($1::text[])
  AND finished_at < clock_timestamp() - $2::bigint * interval '1 millisecond'
GROUP BY state
