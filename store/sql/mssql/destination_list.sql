-- Every destination's breaker row, for the dispatchers' view and outboxctl destination list.
-- Parameters: none.
-- Returns the columns of destination_lock.sql but now.
SELECT destination, state, consecutive_failures, openings, opened_at, next_probe_at,
       probe_started_at, last_error, last_failure_at, paused_at, paused_by, pause_reason,
       changed_at
FROM dbo.outbox_destinations
ORDER BY destination;
