-- The outbox's backlog per minute since @P1, oldest first: the largest sample of the
-- dispatchers that wrote one for the minute (they count the same outbox a few seconds apart).
-- Parameters: @P1 since (a minute's start).
SELECT minute, max(pending) AS pending, max(in_flight) AS in_flight,
       max(oldest_pending_ms) AS oldest_pending_ms
FROM dbo.outbox_backlog_minute
WHERE minute >= @P1
GROUP BY minute
ORDER BY minute
