-- The path of the database file as SQLite opened it: its WAL index is this path with "-shm"
-- appended, which the dispatcher's wake-up reads (src/sqlite/wakeup.rs).
-- Parameters: none.
SELECT file
FROM pragma_database_list
WHERE name = 'main'
