-- Record one applied migration.
-- Parameters: @P1 version, @P2 name, @P3 checksum (hex SHA-256 of the file).
-- Returns nothing.
INSERT INTO dbo.outbox_schema_migrations (version, name, checksum)
VALUES (@P1, @P2, @P3);
