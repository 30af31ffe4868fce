-- 0008_destination_health: each destination's circuit breaker and pause, and when it was held
-- (see migrations/postgres/0008_destination_health.sql). Times are text as strftime writes
-- them ('%Y-%m-%dT%H:%M:%fZ'), so they compare in order.
CREATE TABLE outbox_destinations (
    destination           TEXT    NOT NULL PRIMARY KEY,
    state                 TEXT    NOT NULL DEFAULT 'closed',
    consecutive_failures  INTEGER NOT NULL DEFAULT 0,
    openings              INTEGER NOT NULL DEFAULT 0,
    opened_at             TEXT    NULL,
    next_probe_at         TEXT    NULL,
    probe_started_at      TEXT    NULL,
    last_error            TEXT    NULL,
    last_failure_at       TEXT    NULL,
    paused_at             TEXT    NULL,
    paused_by             TEXT    NULL,
    pause_reason          TEXT    NULL,
    changed_at            TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT outbox_destinations_state CHECK (state IN ('closed', 'open', 'half_open')),
    CONSTRAINT outbox_destinations_name CHECK (length(destination) BETWEEN 1 AND 64
                                               AND destination NOT GLOB '*[^a-z0-9_-]*'),
    CONSTRAINT outbox_destinations_counts CHECK (consecutive_failures >= 0 AND openings >= 0),
    CONSTRAINT outbox_destinations_error_length CHECK (length(last_error) <= 2048),
    CONSTRAINT outbox_destinations_pause CHECK ((paused_at IS NULL) = (paused_by IS NULL)
                                                AND (paused_at IS NULL) = (pause_reason IS NULL)),
    CONSTRAINT outbox_destinations_pause_text CHECK (length(paused_by) BETWEEN 1 AND 200
                                                     AND length(pause_reason) BETWEEN 1 AND 2000)
) STRICT;

CREATE TABLE outbox_destination_holds (
    id           INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    destination  TEXT    NOT NULL,
    held_from    TEXT    NOT NULL,
    held_until   TEXT    NOT NULL,
    CONSTRAINT outbox_destination_holds_order CHECK (held_until >= held_from)
) STRICT;
CREATE INDEX outbox_destination_holds_until_idx ON outbox_destination_holds (held_until);

-- Pauses and resumes are logged too. SQLite cannot alter a CHECK constraint: the log is
-- copied into a table with the wider one (ids kept), as 0006 did.
CREATE TABLE outbox_admin_log_new (
    id        INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    actor     TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    reason    TEXT    NOT NULL,
    -- The ops or filter the action applied to, and its counts, as JSON.
    details   TEXT    NOT NULL DEFAULT '{}',
    CONSTRAINT outbox_admin_log_action CHECK (action IN ('replay', 'cancel', 'purge', 'partitions', 'pause', 'resume'))
) STRICT;
INSERT INTO outbox_admin_log_new (id, at, actor, action, reason, details)
SELECT id, at, actor, action, reason, details FROM outbox_admin_log;
DROP TABLE outbox_admin_log;
ALTER TABLE outbox_admin_log_new RENAME TO outbox_admin_log;
CREATE INDEX outbox_admin_log_at_idx ON outbox_admin_log (at);
