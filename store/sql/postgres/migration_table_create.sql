-- The record of applied migrations: version, name and SHA-256 of the file as applied.
-- Parameters: none.
CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
    version     bigint      PRIMARY KEY,
    name        text        NOT NULL,
    checksum    text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
)
