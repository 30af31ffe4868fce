-- Claim due ops of one dispatcher partition for delivery (G8, G9).
-- Only while the partition lease has this owner and token and is unexpired; only ops whose
-- destination is configured; per order key only the head (lowest token, then sequence) and
-- only when nothing of that key is in flight; never an expire_with_generation op whose token
-- is no longer its resource's newest; never an op of a held destination: paused by an
-- operator, or its breaker (among @P7) not closed (issue 28); of each destination no more than
-- its room, what it can start now (issue 34).
-- - The destinations' rows are read WITH (READCOMMITTEDLOCK, READPAST): the latest committed
--   row under READ COMMITTED and READ COMMITTED SNAPSHOT alike, and a row another transaction
--   holds for writing (a breaker's change, an operator's pause or resume) is skipped, never
--   waited for, and its destination counts as held until that commits. A plain read waited
--   there under locking READ COMMITTED while the claim held the partition lease's shared lock:
--   one dispatcher stopped inside a breaker write stopped every claim and every takeover
--   (issue 34). Whether a destination has a row at all is read WITH (NOLOCK) (it never waits;
--   a row being inserted counts as held for that moment). A pause therefore holds every
--   instance from its commit, and a resume frees it from its commit.
-- The claim reads and changes only the queue (0013_queue_layout.sql): an op is pending when
-- its queue row has no claim (claimed_by_fence IS NULL); the claim sets one and counts the
-- attempt, columns no index holds, so it writes the row in place and no index; the op's
-- request is read by its primary key for the payload.
-- Two statements in one transaction (SQL Server's queue pattern, without an updatable CTE,
-- which Babelfish for PostgreSQL does not run): a SELECT TOP ... ORDER BY keeps the due ops in
-- due order in a table variable, holding update locks on their queue rows to the commit; of
-- each destination the first ones, as many as its room, are chosen (a window over those
-- rows), and one UPDATE claims them.
-- The UPDATE reads WITH (READPAST, ROWLOCK) too, so whatever plan it gets it never waits for a
-- row another transaction holds, and it checks that the row is unclaimed again on the row it
-- changes. Its OUTPUT keeps what the claim changed in a table variable, plain columns only
-- (Babelfish runs no CAST, CASE or COALESCE there), and the SELECT after it reads the op's
-- request beside them; all in one transaction, so a claim whose rows were not returned is
-- rolled back (XACT_ABORT ON), never left in flight unseen.
-- - The lease row is read WITH (HOLDLOCK, ROWLOCK): a shared lock on its key held until the
--   statement commits, a locking read of the latest committed row under READ COMMITTED and
--   READ COMMITTED SNAPSHOT alike (under RCSI a plain read takes no lock and reads a version).
--   A takeover's UPDATE of the row waits for the claim to commit; a takeover already under way
--   is waited for, then its new owner and token are seen and nothing is claimed (G9).
-- - Candidates are read from the queue WITH (READPAST, UPDLOCK, ROWLOCK) (SKIP LOCKED): update
--   locks on the latest committed rows, held to the commit, and rows another transaction has locked (a
--   concurrent claim, a completion, an enqueue, an operator) are skipped, never waited for.
-- - The order-key check reads the other queue rows of the key plainly, never with READPAST: under
--   RCSI it sees their latest committed versions, as PostgreSQL's snapshot does, and every
--   version it can see of an op ahead (in flight, pending, being completed or claimed) makes
--   the claim pass over the later op, never take it out of order (G8): a queue row ahead is
--   unfinished by definition, so every one of them counts; it never waits there,
--   so a producer's open transaction cannot hold the partition lease's renewal behind it.
--   Under locking READ COMMITTED the same read waits for rows other transactions locked,
--   which is only stricter. Keys are also compared by DATALENGTH: SQL Server's = ignores
--   trailing spaces, PostgreSQL's does not.
-- - The newest token of an op's resource (expire_with_generation; the resource is the
--   request's) is a plain read, as in the PostgreSQL file; op_supersede_stale_generation.sql marks those ops before each claim.
-- Time is SYSUTCDATETIME(), read once at the start of the batch (the database clock, G2).
-- The claim records the lease resource beside its token (0003_hardening.sql). Destinations
-- are compared in the column's binary collation (COLLATE), never clashing with OPENJSON's.
-- Parameters: @P1 partition lease resource (nvarchar), @P2 owner id (uniqueidentifier),
-- @P3 token (bigint), @P4 partition count (int), @P5 partition index (int), @P6 configured
-- destinations (nvarchar, a JSON array of strings), @P7 those of them with a breaker
-- (nvarchar, a JSON array; none for a breaker's probe), @P8 how many at most (bigint), @P9 the
-- dispatcher's max_body_bytes (bigint), @P10 each destination's room (nvarchar, a JSON array
-- of integers in the order of @P6).
-- Returns the claimed ops, their attempt number already counted: id bigint, op_id
-- uniqueidentifier, resource nvarchar, fence bigint, destination varchar, idempotency_key
-- varchar, method varchar, path nvarchar, headers nvarchar (JSON text), content_type nvarchar
-- (NULL), body varbinary (empty, 0x, when larger than @P9: a larger one is never loaded, the
-- dispatcher makes the op dead by body_bytes), body_bytes bigint, attempts int, created_at
-- datetimeoffset, claimed_at datetimeoffset, trace_context varchar (NULL), trace_state
-- varchar (NULL), last_attempt_trace varchar (NULL), budget_attempt int, budget_since
-- datetimeoffset.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @candidates TABLE (
    id                  bigint            NOT NULL PRIMARY KEY,
    destination         varchar(64)       COLLATE Latin1_General_100_BIN2 NOT NULL,
    next_attempt_at     datetimeoffset(7) NOT NULL
);
DECLARE @chosen TABLE (id bigint NOT NULL PRIMARY KEY);
DECLARE @claimed TABLE (
    id                  bigint            NOT NULL PRIMARY KEY,
    attempts            int               NOT NULL,
    claimed_at          datetimeoffset(7) NOT NULL,
    last_attempt_trace  varchar(55)       NULL,
    budget_attempt      int               NOT NULL,
    retry_since         datetimeoffset(7) NULL
);

BEGIN TRANSACTION;

-- The due ops in due order, locked to the commit (their update locks keep them ours).
INSERT INTO @candidates (id, destination, next_attempt_at)
SELECT TOP (@P8) o.id, o.destination, o.next_attempt_at
FROM dbo.outbox_queue AS o WITH (READPAST, UPDLOCK, ROWLOCK)
WHERE EXISTS (
        SELECT 1
        FROM dbo.outbox_leases AS l WITH (HOLDLOCK, ROWLOCK)
        WHERE l.resource = @P1
          AND l.owner_id = @P2
          AND l.fence = @P3
          AND l.expires_at > @now)
  AND o.next_attempt_at <= @now
  AND o.claimed_by_fence IS NULL
  AND o.partition % @P4 = @P5
  AND o.destination IN (
        SELECT CAST(j.value AS varchar(64)) COLLATE Latin1_General_100_BIN2
        FROM OPENJSON(@P6) AS j)
  AND NOT EXISTS (
        SELECT 1
        FROM dbo.outbox_destinations AS d WITH (NOLOCK)
        WHERE d.destination COLLATE Latin1_General_100_BIN2 = o.destination
          AND NOT EXISTS (
                SELECT 1
                FROM dbo.outbox_destinations AS f WITH (READCOMMITTEDLOCK, READPAST, ROWLOCK)
                WHERE f.destination = d.destination
                  AND f.paused_at IS NULL
                  AND (f.state = 'closed'
                       OR f.destination COLLATE Latin1_General_100_BIN2 NOT IN (
                            SELECT CAST(k.value AS varchar(64)) COLLATE Latin1_General_100_BIN2
                            FROM OPENJSON(@P7) AS k))))
  AND (o.order_key IS NULL OR NOT EXISTS (
        SELECT 1
        FROM dbo.outbox_queue AS x
        WHERE x.order_key = o.order_key
          AND DATALENGTH(x.order_key) = DATALENGTH(o.order_key)
          AND (x.claimed_by_fence IS NOT NULL
               OR x.fence < o.fence
               OR (x.fence = o.fence AND x.id < o.id))))
  AND NOT (o.expire_with_generation = 1 AND o.fence < (
        SELECT g.fence
        FROM dbo.outbox_requests AS r
        INNER JOIN dbo.outbox_leases AS g ON g.resource = r.resource
        WHERE r.id = o.id))
ORDER BY o.next_attempt_at, o.id;

-- Of each destination, the first ones in due order, as many as its room.
INSERT INTO @chosen (id)
SELECT r.id
FROM (
    SELECT c.id,
           c.destination,
           ROW_NUMBER() OVER (PARTITION BY c.destination
                              ORDER BY c.next_attempt_at, c.id) AS nth
    FROM @candidates AS c) AS r
INNER JOIN OPENJSON(@P6) AS n
    ON CAST(n.value AS varchar(64)) COLLATE Latin1_General_100_BIN2 = r.destination
INNER JOIN OPENJSON(@P10) AS m ON m.[key] = n.[key]
WHERE r.nth <= CAST(m.value AS bigint);

UPDATE dbo.outbox_queue WITH (READPAST, ROWLOCK)
SET claimed_by_fence = @P3,
    claimed_by_lease = @P1,
    claimed_at = @now,
    attempts = attempts + 1
OUTPUT inserted.id,
       inserted.attempts,
       inserted.claimed_at,
       inserted.last_attempt_trace,
       inserted.attempts - inserted.retry_base_attempts,
       inserted.retry_since
INTO @claimed (id, attempts, claimed_at, last_attempt_trace, budget_attempt, retry_since)
WHERE claimed_by_fence IS NULL
  AND id IN (SELECT id FROM @chosen);
SELECT o.id,
       o.op_id,
       o.resource,
       o.fence,
       o.destination,
       o.idempotency_key,
       o.method,
       o.path,
       o.headers,
       o.content_type,
       CASE WHEN DATALENGTH(o.body) <= @P9 THEN o.body ELSE 0x END AS body,
       CAST(DATALENGTH(o.body) AS bigint) AS body_bytes,
       c.attempts,
       o.created_at,
       c.claimed_at,
       o.trace_context,
       o.trace_state,
       c.last_attempt_trace,
       c.budget_attempt,
       COALESCE(c.retry_since, o.created_at) AS budget_since
FROM @claimed AS c
INNER JOIN dbo.outbox_requests AS o ON o.id = c.id;

COMMIT TRANSACTION;
