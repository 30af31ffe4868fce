-- 0006_partition_count: the partition count in force (see migrations/postgres/0006_partition_count.sql).
CREATE TABLE outbox_partition_count (
    singleton   INTEGER NOT NULL DEFAULT 1 PRIMARY KEY CHECK (singleton = 1),
    partitions  INTEGER NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
    changed_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    changed_by  TEXT    NOT NULL CHECK (length(changed_by) BETWEEN 1 AND 200),
    reason      TEXT    NOT NULL CHECK (length(reason) BETWEEN 1 AND 2000)
) STRICT;

-- A change of the count is logged with the replays, cancels and purges. SQLite cannot alter
-- a CHECK constraint: the log is copied into a table with the wider one (ids kept).
CREATE TABLE outbox_admin_log_new (
    id        INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    actor     TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    reason    TEXT    NOT NULL,
    -- The ops or filter the action applied to, and its counts, as JSON.
    details   TEXT    NOT NULL DEFAULT '{}',
    CONSTRAINT outbox_admin_log_action CHECK (action IN ('replay', 'cancel', 'purge', 'partitions'))
) STRICT;
INSERT INTO outbox_admin_log_new (id, at, actor, action, reason, details)
SELECT id, at, actor, action, reason, details FROM outbox_admin_log;
DROP TABLE outbox_admin_log;
ALTER TABLE outbox_admin_log_new RENAME TO outbox_admin_log;
CREATE INDEX outbox_admin_log_at_idx ON outbox_admin_log (at);
