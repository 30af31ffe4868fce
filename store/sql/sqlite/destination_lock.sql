-- A destination's breaker row, inside its change's BEGIN IMMEDIATE transaction (the write
-- lock is held from the start: two dispatchers never both take one probe).
-- Parameters: ?1 destination.
-- Returns the row and the database clock (now).
SELECT destination, state, consecutive_failures, openings, opened_at, next_probe_at,
       probe_started_at, last_error, last_failure_at, paused_at, paused_by, pause_reason,
       changed_at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now
FROM outbox_destinations
WHERE destination = ?1
