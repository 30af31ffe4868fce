-- outboxctl replay/cancel: the ops to change, locked for this transaction, with their
-- resource's newest token. Runs first in the change's transaction (admin/change.rs), then
-- admin_op_replay.sql or admin_op_cancel.sql and admin_log_insert.sql.
-- The ops are read WITH (UPDLOCK, ROWLOCK, HOLDLOCK): update locks on their keys (and the key
-- ranges of ids that name no op) held to the end of the transaction, a locking read of the
-- latest committed row under READ COMMITTED and READ COMMITTED SNAPSHOT alike (under RCSI a
-- plain read takes no lock and reads a version). A dispatcher's claim (READPAST, UPDLOCK)
-- skips these rows and its completion's UPDATE waits, so the state read here is the state
-- changed: an op is never in two states. A dry run rolls back, releasing them.
-- The resource's newest token is a plain read, as in the PostgreSQL file (FOR UPDATE OF o): it
-- only grows, and it only decides whether replay needs --force.
-- Parameters: @P1 op row ids (nvarchar, a JSON array of numbers).
-- Returns id bigint, op_id uniqueidentifier, state varchar, fence bigint, resource_fence
-- bigint (NULL when the resource has no lease row), one row per op found, by id.
SELECT o.id,
       o.op_id,
       o.state,
       o.fence,
       l.fence AS resource_fence
FROM dbo.outbox_ops AS o WITH (UPDLOCK, ROWLOCK, HOLDLOCK)
LEFT JOIN dbo.outbox_leases AS l ON l.resource = o.resource
WHERE o.id IN (SELECT CAST(j.value AS bigint) AS id FROM OPENJSON(@P1) AS j)
ORDER BY o.id;
