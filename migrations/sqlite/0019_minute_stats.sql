-- 0019_minute_stats: what the console's charts read, written by each dispatcher once a
-- minute (see migrations/postgres/0019_minute_stats.sql). Times are text as strftime writes
-- them ('%Y-%m-%dT%H:%M:%fZ'), so they compare in order; instance ids are text as in
-- outbox_dispatchers.
CREATE TABLE outbox_minute_stats (
    minute            TEXT    NOT NULL,
    instance_id       TEXT    NOT NULL,
    destination       TEXT    NOT NULL,
    delivered         INTEGER NOT NULL,
    retried           INTEGER NOT NULL,
    dead              INTEGER NOT NULL,
    latency_le_100ms  INTEGER NOT NULL,
    latency_le_250ms  INTEGER NOT NULL,
    latency_le_500ms  INTEGER NOT NULL,
    latency_le_1s     INTEGER NOT NULL,
    latency_le_2500ms INTEGER NOT NULL,
    latency_le_5s     INTEGER NOT NULL,
    latency_le_10s    INTEGER NOT NULL,
    latency_le_30s    INTEGER NOT NULL,
    latency_le_1m     INTEGER NOT NULL,
    latency_le_5m     INTEGER NOT NULL,
    latency_le_15m    INTEGER NOT NULL,
    latency_le_1h     INTEGER NOT NULL,
    latency_over_1h   INTEGER NOT NULL,
    PRIMARY KEY (minute, instance_id, destination),
    CONSTRAINT outbox_minute_stats_destination CHECK (length(destination) BETWEEN 1 AND 64),
    CONSTRAINT outbox_minute_stats_counts CHECK (
        delivered >= 0 AND retried >= 0 AND dead >= 0
        AND latency_le_100ms >= 0 AND latency_le_250ms >= 0 AND latency_le_500ms >= 0
        AND latency_le_1s >= 0 AND latency_le_2500ms >= 0 AND latency_le_5s >= 0
        AND latency_le_10s >= 0 AND latency_le_30s >= 0 AND latency_le_1m >= 0
        AND latency_le_5m >= 0 AND latency_le_15m >= 0 AND latency_le_1h >= 0
        AND latency_over_1h >= 0)
) STRICT, WITHOUT ROWID;

CREATE TABLE outbox_backlog_minute (
    minute             TEXT    NOT NULL,
    instance_id        TEXT    NOT NULL,
    pending            INTEGER NOT NULL,
    in_flight          INTEGER NOT NULL,
    oldest_pending_ms  INTEGER NULL,
    PRIMARY KEY (minute, instance_id),
    CONSTRAINT outbox_backlog_minute_counts CHECK (pending >= 0 AND in_flight >= 0
                                                   AND oldest_pending_ms >= 0)
) STRICT, WITHOUT ROWID;
