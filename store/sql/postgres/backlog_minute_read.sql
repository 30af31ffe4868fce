-- The outbox's backlog per minute since $1, oldest first: the largest sample of the
-- dispatchers that wrote one for the minute (they count the same outbox a few seconds apart).
-- Parameters: $1 since (a minute's start).
SELECT minute, max(pending) AS pending, max(in_flight) AS in_flight,
       max(oldest_pending_ms) AS oldest_pending_ms
FROM outbox_backlog_minute
WHERE minute >= $1
GROUP BY minute
ORDER BY minute
