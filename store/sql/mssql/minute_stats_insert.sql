-- One dispatcher's counts of one destination for one minute that ended (the console's charts,
-- migrations/mssql/0019_minute_stats.sql). Written once: a retry of a write that committed
-- does nothing.
-- Parameters: @P1 minute (ISO 8601 text with an offset, as every time this backend binds), @P2 instance id, @P3 destination, @P4 delivered, @P5 retried,
-- @P6 dead, and the latency buckets:
-- @P7 latency_le_100ms, @P8 latency_le_250ms, @P9 latency_le_500ms, @P10 latency_le_1s,
-- @P11 latency_le_2500ms, @P12 latency_le_5s, @P13 latency_le_10s, @P14 latency_le_30s,
-- @P15 latency_le_1m, @P16 latency_le_5m, @P17 latency_le_15m, @P18 latency_le_1h,
-- @P19 latency_over_1h.
SET NOCOUNT ON;
DECLARE @minute datetimeoffset(7) = CAST(@P1 AS datetimeoffset(7));
IF NOT EXISTS (SELECT 1 FROM dbo.outbox_minute_stats
               WHERE minute = @minute AND instance_id = @P2 AND destination = @P3)
    INSERT INTO dbo.outbox_minute_stats (
        minute, instance_id, destination, delivered, retried, dead, latency_le_100ms,
        latency_le_250ms, latency_le_500ms, latency_le_1s, latency_le_2500ms, latency_le_5s,
        latency_le_10s, latency_le_30s, latency_le_1m, latency_le_5m, latency_le_15m,
        latency_le_1h, latency_over_1h)
    VALUES (@minute, @P2, @P3, @P4, @P5, @P6, @P7, @P8, @P9, @P10, @P11, @P12, @P13, @P14, @P15, @P16, @P17, @P18, @P19);
