-- outboxctl replay/cancel: the ops to change, locked for this transaction, with their
-- resource's newest token. Runs first in the change's transaction (admin/change.rs), then
-- admin_op_replay.sql or admin_op_cancel.sql and admin_log_insert.sql.
-- The lock is on the row that holds the op's state (0013_queue_layout.sql): its queue row (a
-- dispatcher's claim, READPAST, skips it; its completion waits) or its finished row (the
-- purges, READPAST, skip it). Both are read WITH (UPDLOCK, ROWLOCK, HOLDLOCK): update locks
-- on their keys, and on the key ranges of ids that have no such row, held to the end of the
-- transaction; a locking read of the latest committed row under READ COMMITTED and READ
-- COMMITTED SNAPSHOT alike (under RCSI a plain read takes no lock and reads a version). The
-- queue is read first: an op whose completion is being written is waited for there, then
-- read in outbox_finished as that completion committed it; and no queue row can be inserted
-- for an id read without one (a replay, which would move it back) until this commits. So the
-- state read here is the state changed: an op is never in two states. An op found in neither
-- reads as in flight (as on PostgreSQL) and is refused, never changed. A dry run rolls back,
-- releasing the locks.
-- The resource's newest token is a plain read, as in the PostgreSQL file: it only grows, and
-- it only decides whether replay needs --force.
-- A finished op's erased_at (0017_content_at_rest.sql) is read under the same lock: replay
-- refuses an erased op.
-- Parameters: @P1 op row ids (nvarchar, a JSON array of numbers).
-- Returns id bigint, op_id uniqueidentifier, state varchar, fence bigint, resource_fence
-- bigint (NULL when the resource has no lease row), erased_at datetimeoffset (NULL), one row
-- per op found, by id.
SET NOCOUNT ON;

DECLARE @ids TABLE (id bigint NOT NULL PRIMARY KEY);
DECLARE @queued TABLE (id bigint NOT NULL PRIMARY KEY, claimed_by_fence bigint NULL);
DECLARE @finished TABLE (id bigint NOT NULL PRIMARY KEY, state varchar(16) NOT NULL,
                         erased_at datetimeoffset(7) NULL);

INSERT INTO @ids (id)
SELECT DISTINCT CAST(j.value AS bigint) FROM OPENJSON(@P1) AS j;

INSERT INTO @queued (id, claimed_by_fence)
SELECT q.id, q.claimed_by_fence
FROM dbo.outbox_queue AS q WITH (UPDLOCK, ROWLOCK, HOLDLOCK)
WHERE q.id IN (SELECT i.id FROM @ids AS i);

INSERT INTO @finished (id, state, erased_at)
SELECT f.id, f.state, f.erased_at
FROM dbo.outbox_finished AS f WITH (UPDLOCK, ROWLOCK, HOLDLOCK)
WHERE f.id IN (SELECT i.id FROM @ids AS i);

SELECT o.id,
       o.op_id,
       CAST(CASE
                WHEN q.id IS NOT NULL AND q.claimed_by_fence IS NULL THEN 'pending'
                WHEN q.id IS NOT NULL THEN 'in_flight'
                ELSE COALESCE(f.state, 'in_flight')
            END AS varchar(16)) AS state,
       o.fence,
       l.fence AS resource_fence,
       f.erased_at
FROM dbo.outbox_requests AS o
LEFT JOIN @queued AS q ON q.id = o.id
LEFT JOIN @finished AS f ON f.id = o.id
LEFT JOIN dbo.outbox_leases AS l ON l.resource = o.resource
WHERE o.id IN (SELECT i.id FROM @ids AS i)
ORDER BY o.id;
