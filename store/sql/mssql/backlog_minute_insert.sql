-- One dispatcher's sample of the outbox's backlog for one minute that ended. Written once.
-- Parameters: @P1 minute (ISO 8601 text with an offset), @P2 instance id, @P3 pending,
-- @P4 in flight, @P5 oldest pending age (ms).
SET NOCOUNT ON;
DECLARE @minute datetimeoffset(7) = CAST(@P1 AS datetimeoffset(7));
IF NOT EXISTS (SELECT 1 FROM dbo.outbox_backlog_minute WHERE minute = @minute AND instance_id = @P2)
    INSERT INTO dbo.outbox_backlog_minute (minute, instance_id, pending, in_flight,
                                           oldest_pending_ms)
    VALUES (@minute, @P2, @P3, @P4, @P5);
