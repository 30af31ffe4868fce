-- Retention of the charts' rows: delete the minutes before @P1 (two days ago), of both
-- tables.
-- Parameters: @P1 the oldest minute kept.
-- Returns: deleted bigint.
SET NOCOUNT ON;
DECLARE @deleted bigint;
DELETE FROM dbo.outbox_minute_stats WHERE minute < @P1;
SET @deleted = @@ROWCOUNT;
DELETE FROM dbo.outbox_backlog_minute WHERE minute < @P1;
SELECT @deleted + @@ROWCOUNT AS deleted;
