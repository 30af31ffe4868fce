-- outboxctl purge (and --dry-run): how many finished ops of the given states finished before
-- the cut-off, per state.
-- Parameters: $1 states (text[]; terminal states only, checked by admin.rs), $2 age in ms.
SELECT state, count(*) AS ops
FROM outbox_finished
WHERE state = ANY($1::text[])
  AND finished_at < clock_timestamp() - $2::bigint * interval '1 millisecond'
GROUP BY state
