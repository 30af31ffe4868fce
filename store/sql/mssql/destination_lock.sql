-- A destination's breaker row, locked until its change commits (WITH (UPDLOCK, HOLDLOCK): an
-- update lock held to the end of the transaction, under READ COMMITTED SNAPSHOT too), so two
-- dispatchers never both take one probe.
-- Parameters: @P1 destination (varchar).
-- Returns: destination varchar, state varchar, consecutive_failures int, openings int,
-- opened_at, next_probe_at, probe_started_at datetimeoffset (NULL), last_error nvarchar (NULL),
-- last_failure_at, paused_at datetimeoffset (NULL), paused_by, pause_reason nvarchar (NULL),
-- changed_at datetimeoffset, now datetimeoffset (the database clock).
SELECT destination, state, consecutive_failures, openings, opened_at, next_probe_at,
       probe_started_at, last_error, last_failure_at, paused_at, paused_by, pause_reason,
       changed_at, CAST(SYSUTCDATETIME() AS datetimeoffset(7)) AS now
FROM dbo.outbox_destinations WITH (UPDLOCK, HOLDLOCK)
WHERE destination = @P1;
