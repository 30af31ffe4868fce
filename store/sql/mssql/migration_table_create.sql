-- The record of applied migrations: version, name and SHA-256 of the file as applied.
-- Runs in the migrator's transaction after migration_begin.sql took the migration lock, so
-- two migrators never create it at once.
-- Parameters: none.
-- Returns nothing.
IF OBJECT_ID(N'dbo.outbox_schema_migrations', N'U') IS NULL
BEGIN
    CREATE TABLE dbo.outbox_schema_migrations (
        version     bigint            NOT NULL CONSTRAINT PK_outbox_schema_migrations PRIMARY KEY,
        name        nvarchar(200)     NOT NULL,
        checksum    varchar(64)       NOT NULL,
        applied_at  datetimeoffset(7) NOT NULL
            CONSTRAINT DF_outbox_schema_migrations_applied DEFAULT (SYSUTCDATETIME())
    );
END;
