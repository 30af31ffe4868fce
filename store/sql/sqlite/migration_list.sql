-- Applied migrations, oldest first.
-- Parameters: none.
SELECT version, name, checksum
FROM outbox_schema_migrations
ORDER BY version
