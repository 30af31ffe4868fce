-- A destination's breaker row, locked until its change (a recorded outcome, a probe taken or
-- given back, a pause or resume) commits: two dispatchers never both take one probe.
-- Parameters: $1 destination.
-- Returns the row and the database clock (now).
SELECT destination, state, consecutive_failures, openings, opened_at, next_probe_at,
       probe_started_at, last_error, last_failure_at, paused_at, paused_by, pause_reason,
       changed_at, clock_timestamp() AS now
FROM outbox_destinations
WHERE destination = $1
FOR UPDATE
