-- 0019_minute_stats: what the console's charts read (issue 39), written by each dispatcher
-- once a minute and never per op: the ops it finished in that minute by destination and
-- outcome, with a histogram of their enqueue-to-delivery latency, and the outbox's backlog as
-- it sampled it. A minute's row is written once, after the minute ended (a retried write of
-- it does nothing: the primary key), so the console sums rows and never sees half a minute
-- of one dispatcher. Each dispatcher deletes rows older than two days.
--
-- outbox_minute_stats: per minute (start, the dispatcher's clock, UTC), dispatcher instance
-- and destination. delivered, retried (an attempt failed and the op is due again) and dead
-- count the completions this instance recorded; latency_* split the delivered ones by the time
-- from enqueue to the delivering answer, each column the ops above the previous bound up to
-- its own (le: less than or equal).
CREATE TABLE outbox_minute_stats (
    minute            timestamptz NOT NULL,
    instance_id       uuid        NOT NULL,
    destination       text        NOT NULL,
    delivered         integer     NOT NULL,
    retried           integer     NOT NULL,
    dead              integer     NOT NULL,
    latency_le_100ms  integer     NOT NULL,
    latency_le_250ms  integer     NOT NULL,
    latency_le_500ms  integer     NOT NULL,
    latency_le_1s     integer     NOT NULL,
    latency_le_2500ms integer     NOT NULL,
    latency_le_5s     integer     NOT NULL,
    latency_le_10s    integer     NOT NULL,
    latency_le_30s    integer     NOT NULL,
    latency_le_1m     integer     NOT NULL,
    latency_le_5m     integer     NOT NULL,
    latency_le_15m    integer     NOT NULL,
    latency_le_1h     integer     NOT NULL,
    latency_over_1h   integer     NOT NULL,
    CONSTRAINT outbox_minute_stats_pkey PRIMARY KEY (minute, instance_id, destination),
    CONSTRAINT outbox_minute_stats_destination CHECK (char_length(destination) BETWEEN 1 AND 64),
    CONSTRAINT outbox_minute_stats_counts CHECK (
        delivered >= 0 AND retried >= 0 AND dead >= 0
        AND latency_le_100ms >= 0 AND latency_le_250ms >= 0 AND latency_le_500ms >= 0
        AND latency_le_1s >= 0 AND latency_le_2500ms >= 0 AND latency_le_5s >= 0
        AND latency_le_10s >= 0 AND latency_le_30s >= 0 AND latency_le_1m >= 0
        AND latency_le_5m >= 0 AND latency_le_15m >= 0 AND latency_le_1h >= 0
        AND latency_over_1h >= 0)
);

-- outbox_backlog_minute: per minute and dispatcher instance, the outbox's pending ops (due or
-- not), its ops in flight and the age of its oldest pending op in milliseconds, as the
-- instance last counted them for its gauges (the outbox as a whole, not the instance's share).
CREATE TABLE outbox_backlog_minute (
    minute             timestamptz NOT NULL,
    instance_id        uuid        NOT NULL,
    pending            bigint      NOT NULL,
    in_flight          bigint      NOT NULL,
    oldest_pending_ms  bigint      NULL,
    CONSTRAINT outbox_backlog_minute_pkey PRIMARY KEY (minute, instance_id),
    CONSTRAINT outbox_backlog_minute_counts CHECK (pending >= 0 AND in_flight >= 0
                                                   AND oldest_pending_ms >= 0)
);

-- The rights: the dispatcher writes and purges them (DELETE reads the minute: SELECT), the
-- operator and the viewer read them. grant_roles() keeps the earlier grants and adds these.
ALTER FUNCTION outbox.grant_roles() RENAME TO grant_roles_0017;

CREATE FUNCTION outbox.grant_roles() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT outbox.grant_roles_0017() THEN
        RETURN false;
    END IF;
    GRANT SELECT, INSERT, DELETE ON outbox_minute_stats, outbox_backlog_minute
        TO outbox_dispatcher;
    GRANT SELECT ON outbox_minute_stats, outbox_backlog_minute
        TO outbox_operator, outbox_viewer;
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION outbox.grant_roles() FROM PUBLIC;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION outbox.grant_roles() SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
END
$$;

SELECT outbox.grant_roles();
