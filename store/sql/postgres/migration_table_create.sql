-- The record of applied migrations: version, name and SHA-256 of the file as applied.
-- Created only when missing, so a login without CREATE on the schema (a dispatcher holding
-- outbox_dispatcher alone) migrates when nothing is pending: CREATE TABLE IF NOT EXISTS would
-- be refused it even with the table there.
-- Parameters: none.
DO $$
BEGIN
    IF to_regclass('outbox_schema_migrations') IS NULL THEN
        CREATE TABLE outbox_schema_migrations (
            version     bigint      PRIMARY KEY,
            name        text        NOT NULL,
            checksum    text        NOT NULL,
            applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
        );
    END IF;
END
$$
