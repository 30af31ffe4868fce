-- 0018_database_roles: nothing to change on this backend. SQL Server's 0018 creates the
-- database roles outbox_producer, outbox_dispatcher, outbox_operator and outbox_viewer, which
-- PostgreSQL's 0015 and 0016 created here.
SELECT 1;
