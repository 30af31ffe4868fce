-- Which way this login's producer calls reach the tables (StoreOptions::producer_calls, Auto):
-- through the statements when it may insert requests and write leases itself, otherwise
-- through the functions that run with their owner's rights (a login holding outbox_producer
-- alone, 0015_producer_role.sql and 0016_component_roles.sql). No row before the schema
-- exists: the statements then (a migrating producer).
-- Parameters: none.
-- Returns may_write: whether the login may insert requests and change leases.
SELECT has_table_privilege(r.oid, 'INSERT') AND has_table_privilege(l.oid, 'UPDATE')
           AS may_write
FROM pg_class r, pg_class l
WHERE r.oid = to_regclass('outbox_requests')
  AND l.oid = to_regclass('outbox_leases')
