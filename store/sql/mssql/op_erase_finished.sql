-- Erase after delivery (dispatcher.erase_after, 0017_content_at_rest.sql): clear the body and
-- the header values (the names stay, in order) of up to @P3 delivered, cancelled or superseded
-- ops that finished more than @P1 milliseconds ago and within @P2 milliseconds before that
-- cut-off (NULL: all), and stamp their finished rows' erased_at, in one transaction. Their
-- rows, attempts and request hash stay. Dead ops are never erased. The UPDATE finds its rows
-- by IX_outbox_finished_at WITH (READPAST, ROWLOCK): a row an operator's replay holds is
-- skipped, never waited for, and the others are checked on the current row (G6). A request is
-- cleared only with the finished row this transaction stamped (held exclusively to the commit).
-- Time is SYSUTCDATETIME(), read once; the ages (at most 3650 days by configuration) are split
-- into seconds and milliseconds so DATEADD's int argument never overflows.
-- Parameters: @P1 age in milliseconds (bigint), @P2 window in milliseconds (bigint, NULL: no
-- lower bound), @P3 batch size (bigint).
-- Returns one row: affected (bigint), how many ops were erased.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @before datetimeoffset(7) =
    DATEADD(MILLISECOND, -CAST(@P1 % 1000 AS int), DATEADD(SECOND, -CAST(@P1 / 1000 AS int), @now));
DECLARE @since datetimeoffset(7) = NULL;
IF @P2 IS NOT NULL
    SET @since = DATEADD(MILLISECOND, -CAST(@P2 % 1000 AS int),
                         DATEADD(SECOND, -CAST(@P2 / 1000 AS int), @before));
DECLARE @erased TABLE (id bigint NOT NULL PRIMARY KEY);

BEGIN TRANSACTION;

UPDATE TOP (@P3) dbo.outbox_finished WITH (READPAST, ROWLOCK)
SET erased_at = @now
OUTPUT inserted.id INTO @erased (id)
WHERE state IN ('delivered', 'cancelled', 'superseded')
  AND erased_at IS NULL
  AND finished_at < @before
  AND (@since IS NULL OR finished_at >= @since);

UPDATE r
SET body = 0x,
    headers = COALESCE((SELECT N'[' + STRING_AGG(CAST(JSON_MODIFY(h.value, '$[1]', N'') AS nvarchar(max)), N',')
                                   WITHIN GROUP (ORDER BY CAST(h.[key] AS int)) + N']'
                        FROM OPENJSON(r.headers) AS h), N'[]')
FROM dbo.outbox_requests AS r
JOIN @erased AS e ON e.id = r.id;

COMMIT TRANSACTION;

SELECT CAST(COUNT_BIG(*) AS bigint) AS affected FROM @erased;
