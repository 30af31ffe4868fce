-- 0015_producer_role: nothing to change on this backend. PostgreSQL's 0015 runs the SQL API's
-- lease and enqueue functions with their owner's rights and gives the role outbox_producer
-- EXECUTE on them alone. Here the procedures of the schema outbox already reach the tables
-- through ownership chaining (dbo owns both), so a caller needs only
-- GRANT EXECUTE ON SCHEMA::outbox and no right on any table (README, "Security").
SELECT 1;
