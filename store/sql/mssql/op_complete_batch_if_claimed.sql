-- Record the ends of many attempts in one batch (the recorder's batch): each op becomes
-- delivered, pending again (retry) or dead, and gets its attempt row (G6, G9). A delivered or
-- dead op's queue row is deleted and its finished row inserted; a retried op's queue row gets
-- its new due time and gives up its claim (0013_queue_layout.sql). Each applies only while the
-- op is claimed by this partition lease and token, and the lease still has this owner and
-- token; the others change nothing.
-- The batch runs in its own transaction (BEGIN TRANSACTION ... COMMIT TRANSACTION, with
-- XACT_ABORT ON: an error rolls all of it back), so the ops' queue rows, finished rows and
-- attempt rows commit together or not at all:
-- - The lease row is read WITH (HOLDLOCK, ROWLOCK): a shared lock on its key held until the
--   commit, a locking read of the latest committed row under READ COMMITTED and READ COMMITTED
--   SNAPSHOT alike (under RCSI a plain read takes no lock and reads a version), once, before
--   the queue is touched. A takeover's UPDATE of the row waits for the commit; one already
--   under way is waited for, then its new owner and token are seen and nothing applies (G9).
-- - The DELETE and the UPDATE find their queue rows with update locks and check the claim on
--   the current row in both modes; the rows stay exclusively locked (deleted or changed) until
--   the commit, so a re-queue by a new leader waits and then finds them gone or unclaimed.
-- - An attempt row whose (op_id, attempt) exists already (the new leader of another partition
--   count recorded it as abandoned) is skipped, as ON CONFLICT DO NOTHING does: the check reads
--   WITH (UPDLOCK, HOLDLOCK), a key-range lock held to the commit, so no such row can be
--   inserted between the check and the insert.
-- A completion listed twice for one op row counts once (its first occurrence in the array).
-- Time is SYSUTCDATETIME(), read once at the start of the batch (the database clock, G2);
-- retry delays are added as seconds and milliseconds, so a long delay never overflows DATEADD.
-- Parameters: @P1 partition lease resource (nvarchar), @P2 owner id (uniqueidentifier),
-- @P3 dispatcher token (bigint), @P4 the completions (nvarchar, a JSON array of objects
-- {seq: op row id (bigint), state: new state, delay_ms: retry delay in ms (bigint), error:
-- (string or null), attempt: attempt number (int), started_at: attempt start (text, ISO 8601
-- with offset, read as datetimeoffset(7)), outcome, http_status (int or null), excerpt (string
-- or null), trace (the attempt's span traceparent, string or null: kept on the attempt and the
-- op, where a retry's span links to it)}).
-- On Babelfish for PostgreSQL, OPENJSON returns the error and excerpt texts with their JSON
-- escapes of ", \ and control characters kept; no JSON form avoids it, SQL Server's is kept.
-- Returns the row ids that applied: id (bigint), one row each.
SET NOCOUNT ON;
SET XACT_ABORT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

DECLARE @c TABLE (
    seq bigint NOT NULL PRIMARY KEY,
    state varchar(16) NOT NULL,
    delay_ms bigint NOT NULL,
    error nvarchar(max) NULL,
    attempt int NOT NULL,
    started_at datetimeoffset(7) NOT NULL,
    outcome varchar(16) NOT NULL,
    http_status int NULL,
    excerpt nvarchar(max) NULL,
    trace varchar(55) NULL
);

DECLARE @ended TABLE (
    id bigint NOT NULL PRIMARY KEY,
    attempts int NOT NULL,
    next_attempt_at datetimeoffset(7) NOT NULL,
    retry_base_attempts int NOT NULL,
    retry_since datetimeoffset(7) NULL
);

DECLARE @done TABLE (id bigint NOT NULL PRIMARY KEY);

DECLARE @held bit = 0;

INSERT INTO @c (seq, state, delay_ms, error, attempt, started_at, outcome, http_status, excerpt,
                trace)
SELECT d.seq, d.state, d.delay_ms, d.error, d.attempt, d.started_at, d.outcome, d.http_status,
       d.excerpt, d.trace
FROM (
    SELECT j.seq, j.state, j.delay_ms, j.error, j.attempt, j.started_at, j.outcome,
           j.http_status, j.excerpt, j.trace,
           ROW_NUMBER() OVER (PARTITION BY j.seq ORDER BY CAST(a.[key] AS int)) AS n
    FROM OPENJSON(@P4) AS a
    CROSS APPLY OPENJSON(a.value) WITH (
        seq bigint '$.seq',
        state varchar(16) '$.state',
        delay_ms bigint '$.delay_ms',
        error nvarchar(max) '$.error',
        attempt int '$.attempt',
        started_at datetimeoffset(7) '$.started_at',
        outcome varchar(16) '$.outcome',
        http_status int '$.http_status',
        excerpt nvarchar(max) '$.excerpt',
        trace varchar(55) '$.trace'
    ) AS j
) AS d
WHERE d.n = 1;

BEGIN TRANSACTION;

SELECT @held = 1
FROM dbo.outbox_leases WITH (HOLDLOCK, ROWLOCK)
WHERE resource = @P1
  AND owner_id = @P2
  AND fence = @P3;

-- The OUTPUTs name only the changed table's columns; the completions are joined again from
-- @c after each. In the UPDATE the queue rows are joined to their completions in the FROM list
-- with the join condition in WHERE, the same join as INNER JOIN … ON: Babelfish for
-- PostgreSQL loses an ON join's alias in an UPDATE with OUTPUT ("missing FROM-clause entry").
DELETE FROM dbo.outbox_queue
OUTPUT deleted.id, deleted.attempts, deleted.next_attempt_at, deleted.retry_base_attempts,
       deleted.retry_since
INTO @ended (id, attempts, next_attempt_at, retry_base_attempts, retry_since)
WHERE claimed_by_fence = @P3
  AND claimed_by_lease = @P1
  AND @held = 1
  AND id IN (SELECT c.seq FROM @c AS c WHERE c.state IN ('delivered', 'dead'));

INSERT INTO dbo.outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                                 retry_base_attempts, retry_since)
SELECT e.id, c.state, e.attempts, e.next_attempt_at, @now, c.error, e.retry_base_attempts,
       e.retry_since
FROM @ended AS e
INNER JOIN @c AS c ON c.seq = e.id;

UPDATE q
SET claimed_by_fence = NULL,
    claimed_by_lease = NULL,
    claimed_at = NULL,
    next_attempt_at = DATEADD(MILLISECOND, CAST(c.delay_ms % 1000 AS int),
                              DATEADD(SECOND, CAST(c.delay_ms / 1000 AS int), @now)),
    last_error = c.error,
    last_attempt_trace = c.trace
OUTPUT inserted.id INTO @done (id)
FROM dbo.outbox_queue AS q, @c AS c
WHERE c.seq = q.id
  AND c.state = 'pending'
  AND q.claimed_by_fence = @P3
  AND q.claimed_by_lease = @P1
  AND @held = 1;

INSERT INTO @done (id)
SELECT e.id FROM @ended AS e;

INSERT INTO dbo.outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at,
                                 outcome, http_status, error, response_excerpt, trace_context)
SELECT r.op_id, c.attempt, @P3, c.started_at, @now, c.outcome, c.http_status, c.error,
       c.excerpt, c.trace
FROM @done AS d
INNER JOIN @c AS c ON c.seq = d.id
INNER JOIN dbo.outbox_requests AS r ON r.id = d.id
WHERE NOT EXISTS (
        SELECT 1
        FROM dbo.outbox_attempts AS a WITH (UPDLOCK, HOLDLOCK)
        WHERE a.op_id = r.op_id
          AND a.attempt = c.attempt);

COMMIT TRANSACTION;

SELECT id FROM @done;
