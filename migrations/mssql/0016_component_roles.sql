-- 0016_component_roles: nothing to change on this backend yet. PostgreSQL's 0016 creates the
-- roles outbox_dispatcher, outbox_operator and outbox_viewer with the rights each component
-- needs; SQL Server's database roles come with a migration of their own.
SELECT 1;
