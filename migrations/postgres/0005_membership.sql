-- 0005_membership: dispatcher processes register themselves and heartbeat on the database
-- clock, so that every process (and operators) can see which ones are live: the first part of
-- sharing the partitions between hosts (docs/scaling.md). A row whose heartbeat is older than
-- its ttl is a process that is gone (crashed, paused, or cut off from the database).
CREATE TABLE outbox_dispatchers (
    instance_id   uuid        PRIMARY KEY,
    host          text        NOT NULL,
    pid           bigint      NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    heartbeat_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- How long a heartbeat vouches for the process: its lease_ttl.
    ttl_ms        bigint      NOT NULL,
    -- Its dispatcher.partitions, and how many of those partitions it led at the heartbeat.
    partitions    integer     NOT NULL,
    led           integer     NOT NULL DEFAULT 0,
    CONSTRAINT outbox_dispatchers_host_length CHECK (char_length(host) BETWEEN 1 AND 255),
    CONSTRAINT outbox_dispatchers_ttl CHECK (ttl_ms BETWEEN 1 AND 86400000),
    CONSTRAINT outbox_dispatchers_partitions CHECK (partitions BETWEEN 1 AND 1024),
    CONSTRAINT outbox_dispatchers_led CHECK (led BETWEEN 0 AND partitions)
);
