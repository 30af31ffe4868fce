-- A destination's breaker row as its change decided (store/src/health.rs), in the transaction
-- that locked it.
-- Parameters: $1 destination, $2 state, $3 consecutive failures, $4 openings, $5 opened at,
-- $6 next probe at, $7 probe started at, $8 last error, $9 last failure at, $10 paused at,
-- $11 paused by, $12 pause reason, $13 changed at.
UPDATE outbox_destinations
SET state = $2,
    consecutive_failures = $3,
    openings = $4,
    opened_at = $5,
    next_probe_at = $6,
    probe_started_at = $7,
    last_error = $8,
    last_failure_at = $9,
    paused_at = $10,
    paused_by = $11,
    pause_reason = $12,
    changed_at = $13
WHERE destination = $1
