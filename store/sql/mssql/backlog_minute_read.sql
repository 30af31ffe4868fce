-- The outbox's backlog per minute since @P1, oldest first: the largest sample of the
-- dispatchers that wrote one for the minute (they count the same outbox a few seconds apart).
-- Parameters: @P1 since (a minute's start, ISO 8601 text with an offset).
SELECT minute, max(pending) AS pending, max(in_flight) AS in_flight,
       max(oldest_pending_ms) AS oldest_pending_ms
FROM dbo.outbox_backlog_minute
WHERE minute >= CAST(@P1 AS datetimeoffset(7))
GROUP BY minute
ORDER BY minute
