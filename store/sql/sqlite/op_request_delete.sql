-- The requests of finished ops a purge deleted (op_purge_finished.sql, admin_purge.sql), in the
-- purge's transaction, and with them their attempts (ON DELETE CASCADE, 0013_queue_layout.sql).
-- SQLite has no data-modifying WITH to chain the deletes in one statement as PostgreSQL does.
-- Parameters: ?1 op row ids (a JSON array).
DELETE FROM outbox_requests
WHERE id IN (SELECT value FROM json_each(?1))
