-- Record one applied migration.
-- Parameters: ?1 version, ?2 name, ?3 checksum (hex SHA-256 of the file).
INSERT INTO outbox_schema_migrations (version, name, checksum)
VALUES (?1, ?2, ?3)
