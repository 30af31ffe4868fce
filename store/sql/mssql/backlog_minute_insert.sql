-- One dispatcher's sample of the outbox's backlog for one minute that ended. Written once.
-- Parameters: @P1 minute, @P2 instance id, @P3 pending, @P4 in flight, @P5 oldest pending
-- age (ms).
SET NOCOUNT ON;
IF NOT EXISTS (SELECT 1 FROM dbo.outbox_backlog_minute WHERE minute = @P1 AND instance_id = @P2)
    INSERT INTO dbo.outbox_backlog_minute (minute, instance_id, pending, in_flight,
                                           oldest_pending_ms)
    VALUES (@P1, @P2, @P3, @P4, @P5);
