-- One dispatcher's counts of one destination for one minute that ended (the console's charts,
-- migrations/sqlite/0019_minute_stats.sql). Written once: a retry of a write that committed
-- does nothing.
-- Parameters: ?1 minute, ?2 instance id, ?3 destination, ?4 delivered, ?5 retried, ?6 dead,
-- ?7..?19 the latency buckets, from latency_le_100ms to latency_over_1h.
INSERT INTO outbox_minute_stats (
    minute, instance_id, destination, delivered, retried, dead, latency_le_100ms,
    latency_le_250ms, latency_le_500ms, latency_le_1s, latency_le_2500ms, latency_le_5s,
    latency_le_10s, latency_le_30s, latency_le_1m, latency_le_5m, latency_le_15m,
    latency_le_1h, latency_over_1h)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)
ON CONFLICT (minute, instance_id, destination) DO NOTHING
