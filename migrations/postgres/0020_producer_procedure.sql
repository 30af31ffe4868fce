-- 0020_producer_procedure: nothing to change on this backend. SQL Server's 0020 adds
-- outbox.EnqueueOps, the Rust producer's enqueue for a user holding outbox_producer alone,
-- the twin of PostgreSQL's outbox.enqueue_batch (0016_component_roles.sql).
SELECT 1;
