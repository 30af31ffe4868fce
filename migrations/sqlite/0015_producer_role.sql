-- 0015_producer_role: nothing to change on this backend. PostgreSQL's 0015 runs the SQL API's
-- lease and enqueue functions with their owner's rights and gives the role outbox_producer
-- EXECUTE on them alone. SQLite has no roles and no functions of its own: whoever may read or
-- write the database file may do everything, so the file's mode is the guard (a file the store
-- creates is 0600; README, "Security").
SELECT 1;
