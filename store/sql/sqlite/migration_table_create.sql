-- The record of applied migrations: version, name and SHA-256 of the file as applied.
-- Parameters: none.
CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
    version     INTEGER NOT NULL PRIMARY KEY,
    name        TEXT    NOT NULL,
    checksum    TEXT    NOT NULL,
    applied_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT
