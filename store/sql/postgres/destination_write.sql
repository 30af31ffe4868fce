-- A destination's breaker row as its change decided (store/src/health.rs), in the transaction
-- that locked it. A destination that can deliver again (held before: paused, or its breaker
-- open or half-open; closed and not paused now: a resume, a breaker closing) notifies the
-- dispatchers' channel on commit, so their loops claim its due ops at once instead of at their
-- next poll (issue 28); the claim, not this, decides what is held.
-- Parameters: $1 destination, $2 state, $3 consecutive failures, $4 openings, $5 opened at,
-- $6 next probe at, $7 probe started at, $8 last error, $9 last failure at, $10 paused at,
-- $11 paused by, $12 pause reason, $13 changed at.
WITH before AS (
    SELECT state, paused_at FROM outbox_destinations WHERE destination = $1
), written AS (
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
    RETURNING state, paused_at
)
SELECT count(pg_notify('outbox_ops', 'destination')) AS woken
FROM written, before
WHERE written.state = 'closed' AND written.paused_at IS NULL
  AND (before.state <> 'closed' OR before.paused_at IS NOT NULL)
