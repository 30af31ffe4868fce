-- 0017_content_at_rest: an op's content may be erased once it is finished (issue 37, item 4),
-- and re-encrypted under another key (item 3):
-- the dispatcher's `erase_after` clears the body and the header values (the names stay) of
-- delivered, cancelled and superseded ops, keeping their rows and attempts, and stamps the
-- finished row's erased_at (RFC 3339 text, as every time here). Found by outbox_finished_at_idx.
ALTER TABLE outbox_finished ADD COLUMN erased_at TEXT NULL;

-- Key rotations (`outboxctl keys rotate`) are logged with the other operators' changes. SQLite
-- cannot change a CHECK constraint: the table is rebuilt, as 0008_destination_health.sql did.
CREATE TABLE outbox_admin_log_new (
    id        INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    actor     TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    reason    TEXT    NOT NULL,
    -- The ops or filter the action applied to, and its counts, as JSON.
    details   TEXT    NOT NULL DEFAULT '{}',
    CONSTRAINT outbox_admin_log_action CHECK (action IN ('replay', 'cancel', 'purge', 'partitions', 'pause', 'resume', 'rotate'))
) STRICT;
INSERT INTO outbox_admin_log_new (id, at, actor, action, reason, details)
SELECT id, at, actor, action, reason, details FROM outbox_admin_log;
DROP TABLE outbox_admin_log;
ALTER TABLE outbox_admin_log_new RENAME TO outbox_admin_log;
CREATE INDEX outbox_admin_log_at_idx ON outbox_admin_log (at);
