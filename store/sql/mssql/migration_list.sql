-- Applied migrations, oldest first.
-- Parameters: none.
-- Returns version, name, checksum.
SELECT version, name, checksum
FROM dbo.outbox_schema_migrations
ORDER BY version;
