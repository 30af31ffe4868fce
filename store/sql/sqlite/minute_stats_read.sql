-- What the console's charts read: every destination's counts per minute since ?1, summed over
-- the dispatchers that wrote them, oldest first (at most two days of minutes are kept).
-- Parameters: ?1 since (a minute's start).
SELECT minute, destination,
       sum(delivered) AS delivered, sum(retried) AS retried, sum(dead) AS dead,
       sum(latency_le_100ms) AS latency_le_100ms, sum(latency_le_250ms) AS latency_le_250ms,
       sum(latency_le_500ms) AS latency_le_500ms, sum(latency_le_1s) AS latency_le_1s,
       sum(latency_le_2500ms) AS latency_le_2500ms, sum(latency_le_5s) AS latency_le_5s,
       sum(latency_le_10s) AS latency_le_10s, sum(latency_le_30s) AS latency_le_30s,
       sum(latency_le_1m) AS latency_le_1m, sum(latency_le_5m) AS latency_le_5m,
       sum(latency_le_15m) AS latency_le_15m, sum(latency_le_1h) AS latency_le_1h,
       sum(latency_over_1h) AS latency_over_1h
FROM outbox_minute_stats
WHERE minute >= ?1
GROUP BY minute, destination
ORDER BY minute, destination
