-- 0005_membership: dispatcher processes register themselves and heartbeat on the database
-- clock (see migrations/postgres/0005_membership.sql).
CREATE TABLE outbox_dispatchers (
    instance_id   TEXT    NOT NULL PRIMARY KEY,
    host          TEXT    NOT NULL CHECK (length(host) BETWEEN 1 AND 255),
    pid           INTEGER NOT NULL,
    started_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    heartbeat_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    ttl_ms        INTEGER NOT NULL CHECK (ttl_ms BETWEEN 1 AND 86400000),
    partitions    INTEGER NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
    led           INTEGER NOT NULL DEFAULT 0,
    CHECK (led BETWEEN 0 AND partitions)
) STRICT;
