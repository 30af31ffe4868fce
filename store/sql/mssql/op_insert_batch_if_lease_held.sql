-- The fenced enqueue of a whole batch, inside the Rust side's transaction: the lease row is
-- read first WITH (HOLDLOCK, ROWLOCK) (a locking read under READ COMMITTED and READ COMMITTED
-- SNAPSHOT alike: a shared lock held to the end of the transaction, which a takeover's UPDATE
-- waits for), and when this owner and token do not hold an unexpired lease by the database
-- clock the batch THROWs why (G4): 51003 `no lease` (never leased) or `no lease; current
-- token <n>` (released), 51001 `stale; current token <n>` (another token or owner), 51002
-- `expired`; the same order of checks as enqueue.rs's check_lease. The batch runs in the Rust
-- side's own transaction, which the THROW ends (XACT_ABORT ON): nothing of it is written.
-- Otherwise every op's request is inserted in batch order (ids follow the array), skipping
-- those whose (destination, idempotency key) exists or came earlier in the batch (G7, resolved
-- by the caller in the same transaction), and then each inserted request's queue row
-- (0013_queue_layout.sql), due after its own delay, in the same transaction. SQL Server has no array parameters, so the ops come as one
-- JSON array (OPENJSON; j.[key] is the element's index), and their bytes as one binary value:
-- each op's 32-byte request hash at `at`, then its body of `body_bytes` bytes, cut out with
-- SUBSTRING. (Not hex in the JSON: Babelfish for PostgreSQL ignores CONVERT's hex style and
-- would store the hex digits themselves.) Its OPENJSON also returns text values with their
-- JSON escapes of ", \ and control characters kept: no JSON form avoids that, so headers with
-- quotes (every non-empty list) are not stored right there; SQL Server's form is kept. Keys
-- are compared and grouped in the columns' binary collation, as PostgreSQL compares text. The keys are read
-- WITH (UPDLOCK, HOLDLOCK), as in op_insert_if_lease_held.sql, so two inserts of one key
-- serialise.
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 JSON array of objects {op_id,
-- destination, key, at (bigint, from 1), body_bytes (bigint), order_key, partition, method,
-- path, headers (JSON text, as a JSON string), content_type, expire (bool), delay_ms, trace,
-- trace_state}, @P5 the hashes and bodies (varbinary).
-- Returns the id (bigint) and op_id (uniqueidentifier) of each op inserted, in no particular
-- row order (the ids are in batch order).
SET NOCOUNT ON;
DECLARE @owner uniqueidentifier, @fence bigint, @live bit, @why nvarchar(200);
-- One time for both checks, so a lease that expires between them is reported, not skipped.
DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
SELECT @owner = owner_id,
       @fence = fence,
       @live = CASE WHEN expires_at > @now THEN 1 ELSE 0 END
FROM dbo.outbox_leases WITH (HOLDLOCK, ROWLOCK)
WHERE resource = @P1;
IF @fence IS NULL
    THROW 51003, N'no lease', 1;
IF @fence <> @P3
BEGIN
    SET @why = CONCAT(N'stale; current token ', @fence);
    THROW 51001, @why, 1;
END;
IF @owner IS NULL
BEGIN
    SET @why = CONCAT(N'no lease; current token ', @fence);
    THROW 51003, @why, 1;
END;
IF @owner <> @P2
BEGIN
    SET @why = CONCAT(N'stale; current token ', @fence);
    THROW 51001, @why, 1;
END;
IF @live = 0
    THROW 51002, N'expired', 1;

-- The ids go to a table variable and are selected after: Babelfish for PostgreSQL refuses an
-- OUTPUT sent to the client beside the ORDER BY that numbers the ids in batch order.
DECLARE @inserted TABLE (
    id                      bigint            NOT NULL PRIMARY KEY,
    op_id                   uniqueidentifier  NOT NULL,
    partition               int               NOT NULL,
    destination             varchar(64)       COLLATE Latin1_General_100_BIN2 NOT NULL,
    fence                   bigint            NOT NULL,
    order_key               nvarchar(510)     COLLATE Latin1_General_100_BIN2 NULL,
    expire_with_generation  bit               NOT NULL
);
DECLARE @delays TABLE (op_id uniqueidentifier NOT NULL PRIMARY KEY, delay_ms bigint NOT NULL);

WITH batch AS (
    SELECT CAST(j.[key] AS int) AS ord,
           o.op_id,
           o.destination COLLATE Latin1_General_100_BIN2 AS destination,
           o.idempotency_key COLLATE Latin1_General_100_BIN2 AS idempotency_key,
           o.at,
           o.body_bytes,
           o.order_key,
           o.partition,
           o.method,
           o.path,
           o.headers,
           o.content_type,
           o.expire,
           o.delay_ms,
           o.trace,
           o.trace_state
    FROM OPENJSON(@P4) AS j
    CROSS APPLY OPENJSON(j.value) WITH (
        op_id uniqueidentifier '$.op_id',
        destination varchar(64) '$.destination',
        idempotency_key varchar(255) '$.key',
        at bigint '$.at',
        body_bytes bigint '$.body_bytes',
        order_key nvarchar(max) '$.order_key',
        partition int '$.partition',
        method nvarchar(max) '$.method',
        path nvarchar(max) '$.path',
        headers nvarchar(max) '$.headers',
        content_type nvarchar(max) '$.content_type',
        expire bit '$.expire',
        delay_ms bigint '$.delay_ms',
        trace nvarchar(max) '$.trace',
        trace_state nvarchar(max) '$.trace_state'
    ) AS o
), numbered AS (
    SELECT b.*,
           ROW_NUMBER() OVER (PARTITION BY b.destination, b.idempotency_key ORDER BY b.ord) AS nth
    FROM batch AS b
)
INSERT INTO dbo.outbox_requests (op_id, resource, fence, owner_id, destination,
                                 idempotency_key, request_hash, order_key, partition, method,
                                 path, headers, content_type, body, expire_with_generation,
                                 trace_context, trace_state)
OUTPUT inserted.id, inserted.op_id, inserted.partition, inserted.destination, inserted.fence,
       inserted.order_key, inserted.expire_with_generation
INTO @inserted (id, op_id, partition, destination, fence, order_key, expire_with_generation)
SELECT n.op_id, @P1, @P3, @P2, n.destination, n.idempotency_key,
       SUBSTRING(@P5, n.at, 32), n.order_key, n.partition, n.method, n.path,
       n.headers, n.content_type, SUBSTRING(@P5, n.at + 32, n.body_bytes), n.expire,
       n.trace, n.trace_state
FROM numbered AS n
WHERE n.nth = 1
  AND EXISTS (
      SELECT 1
      FROM dbo.outbox_leases WITH (HOLDLOCK, ROWLOCK)
      WHERE resource = @P1
        AND owner_id = @P2
        AND fence = @P3
        AND expires_at > @now
  )
  AND NOT EXISTS (
      SELECT 1
      FROM dbo.outbox_requests AS e WITH (UPDLOCK, HOLDLOCK)
      WHERE e.destination = n.destination
        AND e.idempotency_key = n.idempotency_key
  )
ORDER BY n.ord;

-- Each request's delay, by its op id (unique: the requests' op ids are).
INSERT INTO @delays (op_id, delay_ms)
SELECT DISTINCT o.op_id, o.delay_ms
FROM OPENJSON(@P4) AS j
CROSS APPLY OPENJSON(j.value) WITH (
    op_id uniqueidentifier '$.op_id',
    delay_ms bigint '$.delay_ms'
) AS o
WHERE o.op_id IN (SELECT i.op_id FROM @inserted AS i);

INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation)
SELECT i.id,
       DATEADD(MILLISECOND, CAST(d.delay_ms % 1000 AS int),
               DATEADD(SECOND, CAST(d.delay_ms / 1000 AS int), @now)),
       i.partition, i.destination, i.fence, i.order_key, i.expire_with_generation
FROM @inserted AS i
INNER JOIN @delays AS d ON d.op_id = i.op_id;

SELECT id, op_id FROM @inserted;
