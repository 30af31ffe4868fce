-- Retention of the charts' rows: delete the minutes before @P1 (two days ago), of both
-- tables.
-- Parameters: @P1 the oldest minute kept (ISO 8601 text with an offset).
-- Returns: deleted bigint.
SET NOCOUNT ON;
DECLARE @deleted bigint;
DELETE FROM dbo.outbox_minute_stats WHERE minute < CAST(@P1 AS datetimeoffset(7));
SET @deleted = @@ROWCOUNT;
DELETE FROM dbo.outbox_backlog_minute WHERE minute < CAST(@P1 AS datetimeoffset(7));
SELECT @deleted + @@ROWCOUNT AS deleted;
