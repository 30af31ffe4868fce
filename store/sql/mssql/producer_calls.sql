-- Which way this user's producer calls reach the tables (StoreOptions::producer_calls, Auto):
-- through the statements when it may insert requests and update leases itself, otherwise
-- through the procedures outbox.TryAcquire, Renew, Release (0004_sql_api.sql) and
-- outbox.EnqueueOps (0020_producer_procedure.sql), which reach the tables through ownership
-- chaining (a user holding outbox_producer alone, 0018_database_roles.sql). A user without
-- rights on a table does not see it, so the schema is known to exist by either the tables or
-- the procedure. No row before it exists: the statements then (a migrating producer).
-- Parameters: none.
-- Returns may_write (bit): whether the user may insert requests and update leases.
SET NOCOUNT ON;
SELECT CAST(CASE WHEN HAS_PERMS_BY_NAME(N'dbo.outbox_requests', N'OBJECT', N'INSERT') = 1
                      AND HAS_PERMS_BY_NAME(N'dbo.outbox_leases', N'OBJECT', N'UPDATE') = 1
                 THEN 1 ELSE 0 END AS bit) AS may_write
WHERE OBJECT_ID(N'dbo.outbox_requests') IS NOT NULL
   OR OBJECT_ID(N'outbox.EnqueueOps') IS NOT NULL;
