-- 0018_database_roles: database roles for the outbox's components on SQL Server (issue 37,
-- docs/design/least-privilege.md; PostgreSQL's are 0015 and 0016), which a deployment grants
-- to its users (ALTER ROLE outbox_dispatcher ADD MEMBER <user>):
--   outbox_producer    EXECUTE on the SQL API's procedures TryAcquire, Renew, Release and
--                      Enqueue (which reach the tables through ownership chaining: dbo owns
--                      both) and nothing else;
--   outbox_dispatcher  what the dispatcher's statements need: it reads requests, claims,
--                      completes and re-queues queue rows, appends attempts and finished rows,
--                      clears an erased op's content, purges past retention, and writes its
--                      partition leases, membership, wake-ups, destination health and holds;
--                      it inserts no request;
--   outbox_operator    outboxctl's admin commands, each logged in outbox_admin_log: it reads
--                      everything and changes queue, finished, destinations, holds, the
--                      partition count and (keys rotate) a request's content; no request
--                      insert, no lease write;
--   outbox_viewer      status, list, show without --body and the console: every column but a
--                      request's body, headers and request hash; the view
--                      dbo.outbox_request_meta gives the body's size and the header names.
-- Roles belong to the database here, so the migration creates them when missing (the
-- migrating user owns the database, or holds CREATE ROLE). SQL Server has no row-level policy
-- by role that Babelfish also runs: unlike PostgreSQL's, a dispatcher's user may write any
-- lease row (README, "Security").

-- 1. A request without its content, for the viewer. Owned by dbo like the table, so a
-- viewer's SELECT on it needs no right on the table (ownership chaining). The header names
-- are validated tokens (no quote or backslash), so they are written into the JSON as they are.
CREATE VIEW dbo.outbox_request_meta AS
SELECT r.id, r.op_id, r.resource, r.fence, r.owner_id, r.destination, r.idempotency_key,
       r.order_key, r.partition, r.method, r.path, r.content_type, r.expire_with_generation,
       r.trace_context, r.trace_state, r.created_at,
       CAST(DATALENGTH(r.body) AS bigint) AS body_bytes,
       COALESCE((SELECT N'[' + STRING_AGG(CAST(N'"' + JSON_VALUE(h.value, '$[0]') + N'"'
                                               AS nvarchar(max)), N',')
                                  WITHIN GROUP (ORDER BY CAST(h.[key] AS int)) + N']'
                 FROM OPENJSON(r.headers) AS h), N'[]') AS header_names
FROM dbo.outbox_requests AS r;
GO

-- 2. The roles, when missing.
IF DATABASE_PRINCIPAL_ID(N'outbox_producer') IS NULL CREATE ROLE outbox_producer;
IF DATABASE_PRINCIPAL_ID(N'outbox_dispatcher') IS NULL CREATE ROLE outbox_dispatcher;
IF DATABASE_PRINCIPAL_ID(N'outbox_operator') IS NULL CREATE ROLE outbox_operator;
IF DATABASE_PRINCIPAL_ID(N'outbox_viewer') IS NULL CREATE ROLE outbox_viewer;
GO

-- 3. The producer: the SQL API's four calls, nothing else (not KeepRejection, which only the
-- loopback's own login calls, nor the helper functions). Granted per procedure: what a later
-- migration adds to the schema is not the producer's until granted.
GRANT EXECUTE ON OBJECT::outbox.TryAcquire TO outbox_producer;
GRANT EXECUTE ON OBJECT::outbox.Renew TO outbox_producer;
GRANT EXECUTE ON OBJECT::outbox.Release TO outbox_producer;
GRANT EXECUTE ON OBJECT::outbox.Enqueue TO outbox_producer;
GO

-- 4. The dispatcher. UPDATE where its statements take update locks (UPDLOCK) as well as where
-- they change rows.
GRANT SELECT ON dbo.outbox_requests TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_queue TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_finished TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_attempts TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_leases TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_destinations TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_destination_holds TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_dispatchers TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_partition_count TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_wakeups TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_rejections TO outbox_dispatcher;
GRANT SELECT ON dbo.outbox_schema_migrations TO outbox_dispatcher;
GRANT INSERT, UPDATE, DELETE ON dbo.outbox_queue TO outbox_dispatcher;
GRANT INSERT, UPDATE, DELETE ON dbo.outbox_finished TO outbox_dispatcher;
GRANT INSERT, DELETE ON dbo.outbox_attempts TO outbox_dispatcher;
GRANT DELETE ON dbo.outbox_requests TO outbox_dispatcher;
GRANT UPDATE (body, headers) ON dbo.outbox_requests TO outbox_dispatcher;
GRANT INSERT, UPDATE ON dbo.outbox_leases TO outbox_dispatcher;
GRANT INSERT, UPDATE ON dbo.outbox_destinations TO outbox_dispatcher;
GRANT INSERT, UPDATE ON dbo.outbox_partition_count TO outbox_dispatcher;
GRANT INSERT, UPDATE ON dbo.outbox_wakeups TO outbox_dispatcher;
GRANT INSERT, DELETE ON dbo.outbox_destination_holds TO outbox_dispatcher;
GRANT INSERT, UPDATE, DELETE ON dbo.outbox_dispatchers TO outbox_dispatcher;
GO

-- 5. The operator.
GRANT SELECT ON dbo.outbox_requests TO outbox_operator;
GRANT SELECT ON dbo.outbox_queue TO outbox_operator;
GRANT SELECT ON dbo.outbox_finished TO outbox_operator;
GRANT SELECT ON dbo.outbox_attempts TO outbox_operator;
GRANT SELECT ON dbo.outbox_leases TO outbox_operator;
GRANT SELECT ON dbo.outbox_destinations TO outbox_operator;
GRANT SELECT ON dbo.outbox_destination_holds TO outbox_operator;
GRANT SELECT ON dbo.outbox_dispatchers TO outbox_operator;
GRANT SELECT ON dbo.outbox_partition_count TO outbox_operator;
GRANT SELECT ON dbo.outbox_wakeups TO outbox_operator;
GRANT SELECT ON dbo.outbox_rejections TO outbox_operator;
GRANT SELECT ON dbo.outbox_schema_migrations TO outbox_operator;
GRANT SELECT ON dbo.outbox_admin_log TO outbox_operator;
GRANT SELECT ON dbo.outbox_ops TO outbox_operator;
GRANT SELECT ON dbo.outbox_request_meta TO outbox_operator;
GRANT INSERT, UPDATE, DELETE ON dbo.outbox_queue TO outbox_operator;
GRANT INSERT, UPDATE, DELETE ON dbo.outbox_finished TO outbox_operator;
GRANT DELETE ON dbo.outbox_requests TO outbox_operator;
GRANT UPDATE (body, headers) ON dbo.outbox_requests TO outbox_operator;
GRANT DELETE ON dbo.outbox_attempts TO outbox_operator;
GRANT INSERT, UPDATE ON dbo.outbox_destinations TO outbox_operator;
GRANT INSERT, UPDATE ON dbo.outbox_partition_count TO outbox_operator;
GRANT INSERT ON dbo.outbox_destination_holds TO outbox_operator;
GRANT INSERT ON dbo.outbox_admin_log TO outbox_operator;
GO

-- 6. The viewer: every column of a request but its content, and the view that sums it up.
GRANT SELECT (id, op_id, resource, fence, owner_id, destination,
    idempotency_key, order_key, partition, method, path, content_type, expire_with_generation,
    trace_context, trace_state, created_at) ON dbo.outbox_requests TO outbox_viewer;
GRANT SELECT (id, op_id, resource, fence, owner_id, destination,
    idempotency_key, order_key, partition, method, path, content_type, expire_with_generation,
    state, attempts, next_attempt_at, claimed_by_fence, claimed_at, last_error, trace_context,
    created_at, delivered_at, finished_at, retry_base_attempts, retry_since, claimed_by_lease,
    trace_state, last_attempt_trace) ON dbo.outbox_ops TO outbox_viewer;
GRANT SELECT ON dbo.outbox_request_meta TO outbox_viewer;
GRANT SELECT ON dbo.outbox_queue TO outbox_viewer;
GRANT SELECT ON dbo.outbox_finished TO outbox_viewer;
GRANT SELECT ON dbo.outbox_attempts TO outbox_viewer;
GRANT SELECT ON dbo.outbox_leases TO outbox_viewer;
GRANT SELECT ON dbo.outbox_destinations TO outbox_viewer;
GRANT SELECT ON dbo.outbox_destination_holds TO outbox_viewer;
GRANT SELECT ON dbo.outbox_dispatchers TO outbox_viewer;
GRANT SELECT ON dbo.outbox_partition_count TO outbox_viewer;
GRANT SELECT ON dbo.outbox_wakeups TO outbox_viewer;
GRANT SELECT ON dbo.outbox_rejections TO outbox_viewer;
GRANT SELECT ON dbo.outbox_schema_migrations TO outbox_viewer;
GRANT SELECT ON dbo.outbox_admin_log TO outbox_viewer;
