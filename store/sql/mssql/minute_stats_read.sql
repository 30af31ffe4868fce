-- What the console's charts read: every destination's counts per minute since @P1, summed over
-- the dispatchers that wrote them, oldest first (at most two days of minutes are kept).
-- Parameters: @P1 since (a minute's start, ISO 8601 text with an offset).
SELECT minute, destination,
       sum(CAST(delivered AS bigint)) AS delivered, sum(CAST(retried AS bigint)) AS retried,
       sum(CAST(dead AS bigint)) AS dead,
       sum(CAST(latency_le_100ms AS bigint)) AS latency_le_100ms,
       sum(CAST(latency_le_250ms AS bigint)) AS latency_le_250ms,
       sum(CAST(latency_le_500ms AS bigint)) AS latency_le_500ms,
       sum(CAST(latency_le_1s AS bigint)) AS latency_le_1s,
       sum(CAST(latency_le_2500ms AS bigint)) AS latency_le_2500ms,
       sum(CAST(latency_le_5s AS bigint)) AS latency_le_5s,
       sum(CAST(latency_le_10s AS bigint)) AS latency_le_10s,
       sum(CAST(latency_le_30s AS bigint)) AS latency_le_30s,
       sum(CAST(latency_le_1m AS bigint)) AS latency_le_1m,
       sum(CAST(latency_le_5m AS bigint)) AS latency_le_5m,
       sum(CAST(latency_le_15m AS bigint)) AS latency_le_15m,
       sum(CAST(latency_le_1h AS bigint)) AS latency_le_1h,
       sum(CAST(latency_over_1h AS bigint)) AS latency_over_1h
FROM dbo.outbox_minute_stats
WHERE minute >= CAST(@P1 AS datetimeoffset(7))
GROUP BY minute, destination
ORDER BY minute, destination
