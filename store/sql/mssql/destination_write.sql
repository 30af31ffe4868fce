-- A destination's breaker row as its change decided (store/src/health.rs), in the transaction
-- that locked it.
-- Parameters: @P1 destination, @P2 state, @P3 consecutive failures (int), @P4 openings (int),
-- @P5 opened at, @P6 next probe at, @P7 probe started at, @P8 last error, @P9 last failure at,
-- @P10 paused at, @P11 paused by, @P12 pause reason, @P13 changed at; times as ISO 8601 text
-- with an offset (NULL where none), read as datetimeoffset(7).
SET NOCOUNT ON;
UPDATE dbo.outbox_destinations
SET state = @P2,
    consecutive_failures = @P3,
    openings = @P4,
    opened_at = CAST(@P5 AS datetimeoffset(7)),
    next_probe_at = CAST(@P6 AS datetimeoffset(7)),
    probe_started_at = CAST(@P7 AS datetimeoffset(7)),
    last_error = @P8,
    last_failure_at = CAST(@P9 AS datetimeoffset(7)),
    paused_at = CAST(@P10 AS datetimeoffset(7)),
    paused_by = @P11,
    pause_reason = @P12,
    changed_at = CAST(@P13 AS datetimeoffset(7))
WHERE destination = @P1;
