-- 0020_producer_procedure: the Rust producer's enqueue for a user holding the role
-- outbox_producer alone (issue 37; PostgreSQL's twin is outbox.enqueue_batch of
-- 0016_component_roles.sql). outbox.Enqueue takes one op and computes its op id, request hash
-- and partition; the Rust producer has computed them already (its request hash is over the
-- clear request, before sealing, G7), so this procedure takes them as they are: wrong ones
-- harm only the caller's own ops, and they are checked for shape, not recomputed. Everything
-- else is checked as outbox.Enqueue checks it (CheckResource, CheckOwner, CheckOp; the body's
-- size is the caller's limit, at most 16 MiB). It reaches the tables through ownership
-- chaining (dbo owns the schema outbox and the tables), so outbox_producer needs EXECUTE on it
-- and no table right.
--
--   outbox.EnqueueOps @Resource, @OwnerId, @Token, @Ops nvarchar(max), @Bytes varbinary(max),
--       @Stage varchar(16) = 'enqueue_batch'
--
-- @Ops and @Bytes are those of store/sql/mssql/op_insert_batch_if_lease_held.sql (@P4, @P5),
-- each op object also holding "supersede" (bool): older tokens' pending ops of its resource
-- and destination become superseded when it is accepted (G5). 1..=1000 ops.
-- @Stage names the Rust call in a kept rejection: enqueue, enqueue_batch or enqueue_in.
--
-- Every op or none. A refused input THROWs 51000 before anything is read or written. The
-- other outcomes are rows, not errors, so a caller's transaction survives a rejection or a
-- conflict, as it does on the Rust producer's statements:
--   one row per op, in batch order: (Outcome 'accepted' or 'duplicate', OpId, Seq, State,
--       CurrentToken NULL): a duplicate is a key holding the same request (G7), its op's id;
--   or one row (Outcome 'stale', 'expired' or 'no_lease', OpId NULL, Seq NULL, State NULL,
--       CurrentToken): this owner and token do not hold the lease (G4), nothing written;
--   or one row (Outcome 'conflict', OpId the op holding the key, Seq, State, CurrentToken
--       NULL): a key holds another request, nothing written.
-- A rejection is kept in dbo.outbox_rejections: by this call when it runs in a transaction of
-- its own (called outside any), else through outbox.RecordRejection (the loopback of 0004),
-- since a record written in the caller's transaction would roll back with it.
--
-- Locking, as the Rust producer's statements: the lease row read WITH (HOLDLOCK, ROWLOCK)
-- before anything is written, a shared lock held to the end of the transaction that a
-- takeover waits for (G4); each key probed WITH (UPDLOCK, HOLDLOCK), so two inserts of one key
-- serialise (G7). Outside a caller's transaction the call opens one of its own and commits it
-- before it returns.
CREATE PROCEDURE outbox.EnqueueOps
    @Resource nvarchar(max),
    @OwnerId uniqueidentifier,
    @Token bigint,
    @Ops nvarchar(max),
    @Bytes varbinary(max),
    @Stage varchar(16) = 'enqueue_batch'
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    DECLARE @problem nvarchar(2048) = outbox.CheckResource(@Resource);
    IF @problem IS NULL SET @problem = outbox.CheckOwner(@OwnerId, @Token);
    IF @problem IS NULL AND (@Stage IS NULL OR @Stage NOT IN ('enqueue', 'enqueue_batch', 'enqueue_in'))
        SET @problem = N'invalid stage: must be enqueue, enqueue_batch or enqueue_in';
    IF @problem IS NULL AND (@Ops IS NULL OR ISJSON(@Ops) = 0 OR LEFT(LTRIM(@Ops), 1) <> N'[')
        SET @problem = N'invalid ops: must be a JSON array of op objects';
    IF @problem IS NOT NULL THROW 51000, @problem, 1;

    DECLARE @bytesLength bigint = COALESCE(DATALENGTH(@Bytes), 0);
    DECLARE @batch TABLE (
        ord              int               NOT NULL PRIMARY KEY,
        op_id            uniqueidentifier  NULL,
        destination      nvarchar(max)     NULL,
        idempotency_key  nvarchar(max)     NULL,
        at               bigint            NULL,
        body_bytes       bigint            NULL,
        order_key        nvarchar(max)     NULL,
        partition        int               NULL,
        method           nvarchar(max)     NULL,
        path             nvarchar(max)     NULL,
        headers          nvarchar(max)     NULL,
        content_type     nvarchar(max)     NULL,
        expire           bit               NULL,
        delay_ms         bigint            NULL,
        trace            nvarchar(max)     NULL,
        trace_state      nvarchar(max)     NULL,
        supersede        bit               NULL
    );
    INSERT INTO @batch (ord, op_id, destination, idempotency_key, at, body_bytes, order_key,
                        partition, method, path, headers, content_type, expire, delay_ms, trace,
                        trace_state, supersede)
    SELECT CAST(j.[key] AS int), o.op_id, o.destination, o.idempotency_key, o.at, o.body_bytes,
           o.order_key, o.partition, o.method, o.path, o.headers, o.content_type, o.expire,
           o.delay_ms, o.trace, o.trace_state, o.supersede
    FROM OPENJSON(@Ops) AS j
    CROSS APPLY OPENJSON(j.value) WITH (
        op_id uniqueidentifier '$.op_id',
        destination nvarchar(max) '$.destination',
        idempotency_key nvarchar(max) '$.key',
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
        trace_state nvarchar(max) '$.trace_state',
        supersede bit '$.supersede'
    ) AS o;

    DECLARE @count int = (SELECT COUNT(*) FROM @batch);
    IF @count NOT BETWEEN 1 AND 1000
        THROW 51000, N'invalid ops: must hold 1..=1000 ops', 1;

    -- Each op, as outbox.Enqueue checks its one, and the shapes the caller computed.
    DECLARE @ord int = -1;  -- OPENJSON numbers the elements from 0
    WHILE @problem IS NULL
    BEGIN
        SET @ord = (SELECT MIN(ord) FROM @batch WHERE ord > @ord);
        IF @ord IS NULL BREAK;
        SELECT @problem = COALESCE(
                   outbox.CheckOp(b.destination, b.method, b.path, b.headers, 0x, b.content_type,
                                  b.idempotency_key, b.order_key, 0, b.delay_ms, b.trace),
                   CASE
                       WHEN b.op_id IS NULL THEN N'invalid op_id: is required'
                       WHEN b.method COLLATE Latin1_General_100_BIN2
                            <> UPPER(b.method COLLATE Latin1_General_100_BIN2)
                           THEN N'invalid method: must be upper case'
                       WHEN b.at IS NULL OR b.at < 1 OR b.body_bytes IS NULL
                            OR b.body_bytes NOT BETWEEN 0 AND 16777216
                            OR b.at + 32 + b.body_bytes - 1 > @bytesLength
                           THEN N'invalid body: its request hash and body must lie in @Bytes, the body at most 16 MiB'
                       WHEN b.partition IS NULL OR b.partition NOT BETWEEN 0 AND 1023
                           THEN N'invalid partition: must be 0..=1023'
                       WHEN b.expire IS NULL OR b.supersede IS NULL OR b.delay_ms IS NULL
                           THEN N'invalid op: expire, supersede and delay_ms are required'
                       WHEN b.trace_state IS NOT NULL
                            AND (b.trace IS NULL OR DATALENGTH(b.trace_state) > 1024
                                 OR b.trace_state COLLATE Latin1_General_100_BIN2 LIKE N'%[^ -~]%')
                           THEN N'invalid tracestate: must be at most 512 bytes of visible ASCII, with a traceparent'
                   END)
        FROM @batch AS b
        WHERE b.ord = @ord;
    END;
    IF @problem IS NOT NULL THROW 51000, @problem, 1;

    -- Checked, so each fits its column's type exactly (destination, key and method are ASCII).
    DECLARE @leaseResource nvarchar(400) = @Resource;
    DECLARE @ownTransaction bit = IIF(@@TRANCOUNT = 0, 1, 0);
    IF @ownTransaction = 1 BEGIN TRANSACTION;

    -- The lease, read with a shared lock held to the end of the transaction (G4); one time for
    -- the check and the inserts' delays.
    DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
    DECLARE @seen bit = 0, @seenOwner uniqueidentifier, @seenFence bigint, @seenLive bit;
    SELECT @seen = 1,
           @seenOwner = owner_id,
           @seenFence = fence,
           @seenLive = CASE WHEN expires_at > @now THEN 1 ELSE 0 END
    FROM dbo.outbox_leases WITH (HOLDLOCK, ROWLOCK)
    WHERE resource = @leaseResource;
    -- The order of store/src/enqueue.rs check_lease.
    DECLARE @rejection varchar(16) = CASE
        WHEN @seen = 0 THEN 'no_lease'
        WHEN @seenFence <> @Token THEN 'stale'
        WHEN @seenOwner IS NULL THEN 'no_lease'
        WHEN @seenOwner <> @OwnerId THEN 'stale'
        WHEN @seenLive = 0 THEN 'expired'
    END;
    IF @rejection IS NOT NULL
    BEGIN
        DECLARE @current bigint = CASE WHEN @rejection = 'expired' THEN NULL ELSE @seenFence END;
        DECLARE @firstDestination varchar(64), @firstKey varchar(255);
        SELECT @firstDestination = destination, @firstKey = idempotency_key
        FROM @batch
        WHERE ord = (SELECT MIN(ord) FROM @batch);
        IF @ownTransaction = 1
        BEGIN
            -- This call's own transaction: the record commits, and the lease check that made it
            -- is this call's, so a caller cannot write one that did not happen.
            INSERT INTO dbo.outbox_rejections (resource, owner_id, fence, current_fence,
                                               destination, idempotency_key, stage, reason)
            VALUES (@leaseResource, @OwnerId, @Token, @current, @firstDestination, @firstKey,
                    @Stage, @rejection);
            COMMIT TRANSACTION;
        END
        ELSE
        BEGIN
            BEGIN TRY
                EXEC outbox.RecordRejection
                    @Reason = @rejection,
                    @Resource = @leaseResource,
                    @OwnerId = @OwnerId,
                    @Token = @Token,
                    @CurrentToken = @current,
                    @Destination = @firstDestination,
                    @IdempotencyKey = @firstKey;
            END TRY
            BEGIN CATCH
                -- The rejection is the answer either way; the caller's transaction decides.
                PRINT CONCAT(N'fenced-outbox: the ', @rejection,
                             N' rejection of this enqueue was not kept: ', ERROR_MESSAGE());
            END CATCH;
        END;
        SELECT CAST(@rejection AS varchar(16)) AS Outcome, CAST(NULL AS uniqueidentifier) AS OpId,
               CAST(NULL AS bigint) AS Seq, CAST(NULL AS varchar(16)) AS State,
               @current AS CurrentToken;
        RETURN;
    END;

    -- Each op's key and request hash, and which use of the key in the batch it is.
    DECLARE @keys TABLE (
        ord              int               NOT NULL PRIMARY KEY,
        destination      varchar(64)       COLLATE Latin1_General_100_BIN2 NOT NULL,
        idempotency_key  varchar(255)      COLLATE Latin1_General_100_BIN2 NOT NULL,
        request_hash     varbinary(32)     NOT NULL,
        nth              bigint            NOT NULL
    );
    INSERT INTO @keys (ord, destination, idempotency_key, request_hash, nth)
    SELECT x.ord, x.destination, x.idempotency_key, x.request_hash,
           ROW_NUMBER() OVER (PARTITION BY x.destination, x.idempotency_key ORDER BY x.ord)
    FROM (SELECT b.ord,
                 CAST(b.destination AS varchar(64)) COLLATE Latin1_General_100_BIN2 AS destination,
                 CAST(b.idempotency_key AS varchar(255)) COLLATE Latin1_General_100_BIN2 AS idempotency_key,
                 SUBSTRING(@Bytes, b.at, 32) AS request_hash
          FROM @batch AS b) AS x;

    -- The ops whose key exists already, probed with locks held to the end, so no other insert
    -- of these keys can come between the probe and the insert (G7).
    DECLARE @existing TABLE (
        destination      varchar(64)       COLLATE Latin1_General_100_BIN2 NOT NULL,
        idempotency_key  varchar(255)      COLLATE Latin1_General_100_BIN2 NOT NULL,
        id               bigint            NOT NULL,
        op_id            uniqueidentifier  NOT NULL,
        request_hash     varbinary(32)     NOT NULL,
        PRIMARY KEY (destination, idempotency_key)
    );
    INSERT INTO @existing (destination, idempotency_key, id, op_id, request_hash)
    SELECT r.destination, r.idempotency_key, r.id, r.op_id, r.request_hash
    FROM dbo.outbox_requests AS r WITH (UPDLOCK, HOLDLOCK)
    WHERE EXISTS (SELECT 1
                  FROM @keys AS k
                  WHERE k.destination = r.destination
                    AND k.idempotency_key = r.idempotency_key
                    AND k.nth = 1);

    -- A key holding another request, in the table or earlier in the batch: nothing written.
    DECLARE @conflictOpId uniqueidentifier, @conflictSeq bigint;
    SELECT TOP (1) @conflictOpId = e.op_id, @conflictSeq = e.id
    FROM @keys AS k
    INNER JOIN @existing AS e
        ON e.destination = k.destination AND e.idempotency_key = k.idempotency_key
    WHERE e.request_hash <> k.request_hash
    ORDER BY k.ord;
    IF @conflictOpId IS NULL
        SELECT TOP (1) @conflictOpId = b.op_id
        FROM @keys AS k
        INNER JOIN @keys AS f
            ON f.destination = k.destination AND f.idempotency_key = k.idempotency_key
           AND f.nth = 1
        INNER JOIN @batch AS b ON b.ord = f.ord
        WHERE k.nth > 1
          AND k.request_hash <> f.request_hash
          AND NOT EXISTS (SELECT 1 FROM @existing AS e
                          WHERE e.destination = k.destination
                            AND e.idempotency_key = k.idempotency_key)
        ORDER BY k.ord;
    IF @conflictOpId IS NOT NULL
    BEGIN
        IF @ownTransaction = 1 COMMIT TRANSACTION;
        SELECT CAST('conflict' AS varchar(16)) AS Outcome, @conflictOpId AS OpId,
               @conflictSeq AS Seq, CAST(NULL AS varchar(16)) AS State,
               CAST(NULL AS bigint) AS CurrentToken;
        RETURN;
    END;

    -- The new requests, in batch order, then their queue rows (0013_queue_layout.sql).
    DECLARE @inserted TABLE (
        id                      bigint            NOT NULL PRIMARY KEY,
        op_id                   uniqueidentifier  NOT NULL,
        partition               int               NOT NULL,
        destination             varchar(64)       COLLATE Latin1_General_100_BIN2 NOT NULL,
        fence                   bigint            NOT NULL,
        order_key               nvarchar(510)     COLLATE Latin1_General_100_BIN2 NULL,
        expire_with_generation  bit               NOT NULL
    );
    INSERT INTO dbo.outbox_requests (op_id, resource, fence, owner_id, destination,
                                     idempotency_key, request_hash, order_key, partition,
                                     method, path, headers, content_type, body,
                                     expire_with_generation, trace_context, trace_state)
    OUTPUT inserted.id, inserted.op_id, inserted.partition, inserted.destination,
           inserted.fence, inserted.order_key, inserted.expire_with_generation
    INTO @inserted (id, op_id, partition, destination, fence, order_key, expire_with_generation)
    SELECT b.op_id, @leaseResource, @Token, @OwnerId, k.destination, k.idempotency_key,
           k.request_hash, b.order_key, b.partition, b.method, b.path, b.headers, b.content_type,
           SUBSTRING(@Bytes, b.at + 32, b.body_bytes), b.expire, b.trace, b.trace_state
    FROM @batch AS b
    INNER JOIN @keys AS k ON k.ord = b.ord
    WHERE k.nth = 1
      AND NOT EXISTS (SELECT 1 FROM @existing AS e
                      WHERE e.destination = k.destination
                        AND e.idempotency_key = k.idempotency_key)
    ORDER BY b.ord;

    INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                                  expire_with_generation)
    SELECT i.id,
           DATEADD(MILLISECOND, CAST(b.delay_ms % 1000 AS int),
                   DATEADD(SECOND, CAST(b.delay_ms / 1000 AS int), @now)),
           i.partition, i.destination, i.fence, i.order_key, i.expire_with_generation
    FROM @inserted AS i
    INNER JOIN @batch AS b ON b.op_id = i.op_id;

    -- Older tokens' pending ops of this resource, once per destination asked by an accepted
    -- op (G5), as op_supersede_older_pending.sql.
    IF EXISTS (SELECT 1 FROM @batch AS b INNER JOIN @inserted AS i ON i.op_id = b.op_id
               WHERE b.supersede = 1)
    BEGIN
        DECLARE @gone TABLE (
            id                  bigint            NOT NULL PRIMARY KEY,
            attempts            int               NOT NULL,
            next_attempt_at     datetimeoffset(7) NOT NULL,
            retry_base_attempts int               NOT NULL,
            retry_since         datetimeoffset(7) NULL,
            last_attempt_trace  varchar(55)       NULL
        );
        DELETE FROM dbo.outbox_queue
        OUTPUT deleted.id, deleted.attempts, deleted.next_attempt_at,
               deleted.retry_base_attempts, deleted.retry_since, deleted.last_attempt_trace
        INTO @gone (id, attempts, next_attempt_at, retry_base_attempts, retry_since,
                    last_attempt_trace)
        WHERE destination IN (SELECT i.destination
                              FROM @batch AS b INNER JOIN @inserted AS i ON i.op_id = b.op_id
                              WHERE b.supersede = 1)
          AND fence < @Token
          AND claimed_by_fence IS NULL
          AND id IN (SELECT r.id FROM dbo.outbox_requests AS r
                     WHERE r.resource = @leaseResource);
        INSERT INTO dbo.outbox_finished (id, state, attempts, next_attempt_at, finished_at,
                                         last_error, retry_base_attempts, retry_since,
                                         last_attempt_trace)
        SELECT g.id, 'superseded', g.attempts, g.next_attempt_at, @now,
               CONCAT(N'superseded by token ', @Token), g.retry_base_attempts, g.retry_since,
               g.last_attempt_trace
        FROM @gone AS g;
    END;

    IF @ownTransaction = 1 COMMIT TRANSACTION;

    -- One row per op: accepted, or a duplicate of the op holding its key (in the table, or
    -- accepted earlier in this batch), its state as op_find_by_key.sql reads it.
    SELECT CAST(CASE WHEN i.id IS NOT NULL THEN 'accepted' ELSE 'duplicate' END
                AS varchar(16)) AS Outcome,
           COALESCE(e.op_id, fi.op_id, i.op_id) AS OpId,
           COALESCE(e.id, fi.id, i.id) AS Seq,
           CAST(COALESCE(
                    (SELECT CASE WHEN q.claimed_by_fence IS NULL THEN 'pending' ELSE 'in_flight' END
                     FROM dbo.outbox_queue AS q
                     WHERE q.id = COALESCE(e.id, fi.id, i.id)),
                    (SELECT f.state FROM dbo.outbox_finished AS f
                     WHERE f.id = COALESCE(e.id, fi.id, i.id)),
                    'in_flight') AS varchar(16)) AS State,
           CAST(NULL AS bigint) AS CurrentToken
    FROM @keys AS k
    INNER JOIN @batch AS b ON b.ord = k.ord
    LEFT JOIN @inserted AS i ON i.op_id = b.op_id
    LEFT JOIN @existing AS e
        ON e.destination = k.destination AND e.idempotency_key = k.idempotency_key
    LEFT JOIN @keys AS fk
        ON fk.destination = k.destination AND fk.idempotency_key = k.idempotency_key
       AND fk.nth = 1 AND k.nth > 1
    LEFT JOIN @batch AS fb ON fb.ord = fk.ord
    LEFT JOIN @inserted AS fi ON fi.op_id = fb.op_id
    ORDER BY k.ord;
END;
GO

-- The producer may call it; what it reaches, it reaches through ownership chaining.
GRANT EXECUTE ON OBJECT::outbox.EnqueueOps TO outbox_producer;
GO
