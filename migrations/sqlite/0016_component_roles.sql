-- 0016_component_roles: nothing to change on this backend. PostgreSQL's 0016 creates the roles
-- outbox_dispatcher, outbox_operator and outbox_viewer with the rights each component needs.
-- SQLite has no roles: every process that may open the database file may do everything, so
-- the file's mode is the only guard (README, "Security").
SELECT 1;
