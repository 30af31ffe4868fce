-- 0019_minute_stats: what the console's charts read, written by each dispatcher once a
-- minute (see migrations/postgres/0019_minute_stats.sql for the columns), and the rights of
-- 0018's roles on them: the dispatcher writes and purges, the operator and the viewer read.
CREATE TABLE dbo.outbox_minute_stats (
    minute            datetimeoffset(7) NOT NULL,
    instance_id       uniqueidentifier  NOT NULL,
    destination       nvarchar(64)      NOT NULL,
    delivered         int               NOT NULL,
    retried           int               NOT NULL,
    dead              int               NOT NULL,
    latency_le_100ms  int               NOT NULL,
    latency_le_250ms  int               NOT NULL,
    latency_le_500ms  int               NOT NULL,
    latency_le_1s     int               NOT NULL,
    latency_le_2500ms int               NOT NULL,
    latency_le_5s     int               NOT NULL,
    latency_le_10s    int               NOT NULL,
    latency_le_30s    int               NOT NULL,
    latency_le_1m     int               NOT NULL,
    latency_le_5m     int               NOT NULL,
    latency_le_15m    int               NOT NULL,
    latency_le_1h     int               NOT NULL,
    latency_over_1h   int               NOT NULL,
    CONSTRAINT PK_outbox_minute_stats PRIMARY KEY (minute, instance_id, destination),
    CONSTRAINT CK_outbox_minute_stats_destination CHECK (LEN(destination) BETWEEN 1 AND 64),
    CONSTRAINT CK_outbox_minute_stats_counts CHECK (
        delivered >= 0 AND retried >= 0 AND dead >= 0
        AND latency_le_100ms >= 0 AND latency_le_250ms >= 0 AND latency_le_500ms >= 0
        AND latency_le_1s >= 0 AND latency_le_2500ms >= 0 AND latency_le_5s >= 0
        AND latency_le_10s >= 0 AND latency_le_30s >= 0 AND latency_le_1m >= 0
        AND latency_le_5m >= 0 AND latency_le_15m >= 0 AND latency_le_1h >= 0
        AND latency_over_1h >= 0)
);

CREATE TABLE dbo.outbox_backlog_minute (
    minute             datetimeoffset(7) NOT NULL,
    instance_id        uniqueidentifier  NOT NULL,
    pending            bigint            NOT NULL,
    in_flight          bigint            NOT NULL,
    oldest_pending_ms  bigint            NULL,
    CONSTRAINT PK_outbox_backlog_minute PRIMARY KEY (minute, instance_id),
    CONSTRAINT CK_outbox_backlog_minute_counts CHECK (pending >= 0 AND in_flight >= 0
                                                      AND oldest_pending_ms >= 0)
);
GO

GRANT SELECT, INSERT, DELETE ON dbo.outbox_minute_stats TO outbox_dispatcher;
GRANT SELECT, INSERT, DELETE ON dbo.outbox_backlog_minute TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_minute_stats TO outbox_operator;
GRANT SELECT ON dbo.outbox_backlog_minute TO outbox_operator;
GRANT SELECT ON dbo.outbox_minute_stats TO outbox_viewer;
GRANT SELECT ON dbo.outbox_backlog_minute TO outbox_viewer;
