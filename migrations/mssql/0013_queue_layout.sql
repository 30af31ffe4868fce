-- 0013_queue_layout: delivering an op no longer rewrites the row that keeps it (issue 36,
-- docs/design/queue-layout.md; the twin of migrations/postgres/0013_queue_layout.sql). Until
-- now an op was one wide row that the claim and the completion each rewrote, and both changed
-- `state`, which every filtered index reads, so each moved the row between indexes. Now the
-- op is three kinds of row:
--   outbox_requests  what the producer asked for (the old outbox_ops, renamed): written once
--                    at enqueue, never updated; the G7 key, `show` and `list --resource` read it;
--   outbox_queue     one narrow row per unfinished op: what the claim reads and changes. The
--                    claim changes only columns no index holds (the claim, the attempt count),
--                    an update of the clustered row in place that touches no other index; the
--                    row is deleted when the op finishes;
--   outbox_finished  one row per finished op (delivered, dead, cancelled, superseded), written
--                    by the statement (or transaction) that deletes its queue row.
-- outbox_attempts is unchanged: attempts were already appended (its foreign key to the op's
-- op_id follows the renamed table, so purges still delete attempts by ON DELETE CASCADE). An
-- op's state is stored once: pending or in flight is its queue row (claimed_by_fence), a
-- terminal state its finished row. The view dbo.outbox_ops has the old table's columns, for
-- readers of ops (it cannot be written to).
--
-- The migration keeps every op: the unfinished ones' queue rows and the finished ones' rows
-- are copied from the old columns, which are then dropped (a metadata change on SQL Server:
-- existing request rows are not rewritten, their pages keep the dropped columns' bytes until
-- the table is rebuilt). sp_rename renames the table without copying it; its constraints and
-- indexes keep their names (CK_outbox_ops_*, UQ_outbox_ops_*, IX_outbox_ops_resource), as the
-- PostgreSQL ones do. Everything runs in the migration's one transaction (the runner sends
-- the batches between GO lines in order), holding outbox_ops exclusively from the first
-- ALTER on while it copies the backlog and the finished ops' narrow part.
-- The request's CHECK constraints (G10, G11: method, destination, key, partition slot, path,
-- body size, headers) stay on outbox_requests; those on the columns that moved go with them.
-- One column or constraint per ALTER TABLE, as Babelfish for PostgreSQL requires (0002).

-- 1. The queue, clustered on the request's id. No foreign key to the request: the store's
-- statements write both rows in one transaction, and the purge deletes neither while the
-- other is needed. destination, fence, order_key and expire_with_generation are the
-- request's, copied so the claim reads no other table; partition is its slot (0..1023, G12).
-- last_error and last_attempt_trace are the previous attempt's, for the retry that reads them
-- back. SQL Server has no HOT update; clustered on id, a claim writes only the row itself
-- (none of its columns is in another index), and a row that grows (claimed_by_lease set) may
-- split its page but is never forwarded, as a heap row would be. Not FILLFACTOR 40 as on
-- PostgreSQL: SQL Server applies a fill factor only when an index is built or rebuilt.
CREATE TABLE dbo.outbox_queue (
    id                      bigint            NOT NULL CONSTRAINT PK_outbox_queue PRIMARY KEY,
    next_attempt_at         datetimeoffset(7) NOT NULL,
    partition               int               NOT NULL,
    destination             varchar(64)       COLLATE Latin1_General_100_BIN2 NOT NULL,
    fence                   bigint            NOT NULL,
    order_key               nvarchar(510)     COLLATE Latin1_General_100_BIN2 NULL,
    expire_with_generation  bit               NOT NULL,
    attempts                int               NOT NULL CONSTRAINT DF_outbox_queue_attempts DEFAULT (0),
    claimed_by_fence        bigint            NULL,
    -- Compared with outbox_leases.resource, so it has that column's binary collation.
    claimed_by_lease        nvarchar(400)     COLLATE Latin1_General_100_BIN2 NULL,
    claimed_at              datetimeoffset(7) NULL,
    retry_base_attempts     int               NOT NULL CONSTRAINT DF_outbox_queue_retry_base DEFAULT (0),
    retry_since             datetimeoffset(7) NULL,
    last_error              nvarchar(max)     NULL,
    last_attempt_trace      varchar(55)       NULL,
    CONSTRAINT CK_outbox_queue_claim CHECK ((claimed_by_fence IS NULL AND claimed_at IS NULL)
                                            OR (claimed_by_fence IS NOT NULL AND claimed_at IS NOT NULL))
);

-- 2. Finished ops, clustered on id (appended at the end of the B-tree). No foreign key
-- either. attempts, next_attempt_at, retry_* and last_attempt_trace are the op's when it
-- finished: `show` and `list` print them, and a replay starts its fresh budget from attempts.
CREATE TABLE dbo.outbox_finished (
    id                   bigint            NOT NULL CONSTRAINT PK_outbox_finished PRIMARY KEY,
    state                varchar(16)       NOT NULL,
    attempts             int               NOT NULL,
    next_attempt_at      datetimeoffset(7) NOT NULL,
    finished_at          datetimeoffset(7) NOT NULL,
    last_error           nvarchar(max)     NULL,
    retry_base_attempts  int               NOT NULL CONSTRAINT DF_outbox_finished_retry_base DEFAULT (0),
    retry_since          datetimeoffset(7) NULL,
    last_attempt_trace   varchar(55)       NULL,
    CONSTRAINT CK_outbox_finished_state CHECK (state IN ('delivered', 'dead', 'cancelled', 'superseded'))
);
GO

-- 3. Carry the ops forward. An op in flight keeps its claim (lease and token), so the next
-- leader of its partition finds it and records its attempt as unknown (G9); one claimed before
-- 0003_hardening.sql named no lease and is re-queued by any new leader. The old table is read
-- WITH (TABLOCKX, HOLDLOCK): nothing writes an op between this copy and the rename below.
INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation, attempts, claimed_by_fence,
                              claimed_by_lease, claimed_at, retry_base_attempts, retry_since,
                              last_error, last_attempt_trace)
SELECT o.id, o.next_attempt_at, o.partition, o.destination, o.fence, o.order_key,
       o.expire_with_generation, o.attempts,
       CASE WHEN o.state = 'in_flight' THEN o.claimed_by_fence END,
       CASE WHEN o.state = 'in_flight' THEN COALESCE(o.claimed_by_lease, N'') END,
       CASE WHEN o.state = 'in_flight' THEN COALESCE(o.claimed_at, o.created_at) END,
       o.retry_base_attempts, o.retry_since, o.last_error, o.last_attempt_trace
FROM dbo.outbox_ops AS o WITH (TABLOCKX, HOLDLOCK)
WHERE o.state IN ('pending', 'in_flight');

INSERT INTO dbo.outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                                 retry_base_attempts, retry_since, last_attempt_trace)
SELECT o.id, o.state, o.attempts, o.next_attempt_at,
       COALESCE(o.finished_at, o.delivered_at, o.created_at), o.last_error,
       o.retry_base_attempts, o.retry_since, o.last_attempt_trace
FROM dbo.outbox_ops AS o WITH (TABLOCKX, HOLDLOCK)
WHERE o.state IN ('delivered', 'dead', 'cancelled', 'superseded');
GO

-- 4. The old table keeps only the request. Its filtered indexes (each reads `state`), and the
-- defaults and constraints of the columns that moved, go with them.
DROP INDEX IX_outbox_ops_due ON dbo.outbox_ops;
DROP INDEX IX_outbox_ops_order_key ON dbo.outbox_ops;
DROP INDEX IX_outbox_ops_in_flight ON dbo.outbox_ops;
DROP INDEX IX_outbox_ops_supersede ON dbo.outbox_ops;
DROP INDEX IX_outbox_ops_generation ON dbo.outbox_ops;
DROP INDEX IX_outbox_ops_finished ON dbo.outbox_ops;
DROP INDEX IX_outbox_ops_attention ON dbo.outbox_ops;
ALTER TABLE dbo.outbox_ops DROP CONSTRAINT CK_outbox_ops_state;
ALTER TABLE dbo.outbox_ops DROP CONSTRAINT CK_outbox_ops_attempts_not_negative;
ALTER TABLE dbo.outbox_ops DROP CONSTRAINT CK_outbox_ops_claim_matches_state;
-- A column with a default cannot be dropped on SQL Server before its default constraint;
-- Babelfish for PostgreSQL keeps defaults as column defaults, not named constraints (there is
-- no such object to drop, and the column goes with its default).
IF OBJECT_ID(N'dbo.DF_outbox_ops_state', N'D') IS NOT NULL
    ALTER TABLE dbo.outbox_ops DROP CONSTRAINT DF_outbox_ops_state;
IF OBJECT_ID(N'dbo.DF_outbox_ops_attempts', N'D') IS NOT NULL
    ALTER TABLE dbo.outbox_ops DROP CONSTRAINT DF_outbox_ops_attempts;
IF OBJECT_ID(N'dbo.DF_outbox_ops_next', N'D') IS NOT NULL
    ALTER TABLE dbo.outbox_ops DROP CONSTRAINT DF_outbox_ops_next;
IF OBJECT_ID(N'dbo.DF_outbox_ops_retry_base', N'D') IS NOT NULL
    ALTER TABLE dbo.outbox_ops DROP CONSTRAINT DF_outbox_ops_retry_base;
ALTER TABLE dbo.outbox_ops DROP COLUMN state;
ALTER TABLE dbo.outbox_ops DROP COLUMN attempts;
ALTER TABLE dbo.outbox_ops DROP COLUMN next_attempt_at;
ALTER TABLE dbo.outbox_ops DROP COLUMN claimed_by_fence;
ALTER TABLE dbo.outbox_ops DROP COLUMN claimed_by_lease;
ALTER TABLE dbo.outbox_ops DROP COLUMN claimed_at;
ALTER TABLE dbo.outbox_ops DROP COLUMN last_error;
ALTER TABLE dbo.outbox_ops DROP COLUMN delivered_at;
ALTER TABLE dbo.outbox_ops DROP COLUMN finished_at;
ALTER TABLE dbo.outbox_ops DROP COLUMN retry_base_attempts;
ALTER TABLE dbo.outbox_ops DROP COLUMN retry_since;
ALTER TABLE dbo.outbox_ops DROP COLUMN last_attempt_trace;
GO

-- @objtype named: SQL Server infers it, Babelfish for PostgreSQL requires it.
EXEC sp_rename @objname = N'dbo.outbox_ops', @newname = N'outbox_requests', @objtype = N'OBJECT';
GO

-- 5. The indexes of the new layout.
-- The claim: due ops in order. In-flight rows stay in it (the claim changes no indexed
-- column, so it writes no index) and are skipped by a check on the row (claimed_by_fence):
-- at most the ops in flight. Not filtered on the claim for the same reason.
CREATE INDEX IX_outbox_queue_due ON dbo.outbox_queue (next_attempt_at, id);
-- G8: each order key's head (lowest token, then sequence) and whether the key has an op in
-- flight. Filtered on a column no claim changes; unordered ops have no entry.
CREATE INDEX IX_outbox_queue_order_key ON dbo.outbox_queue (order_key, fence, id)
    WHERE order_key IS NOT NULL;
-- G5: the few ops that expire with their token's generation, checked every claim cycle.
CREATE INDEX IX_outbox_queue_generation ON dbo.outbox_queue (id)
    WHERE expire_with_generation = 1;
-- `list --state dead|cancelled|superseded`, `replay --state dead`, the console's attention
-- view: the few ops that need an operator, newest first, without the delivered history.
CREATE INDEX IX_outbox_finished_attention ON dbo.outbox_finished (state, id)
    WHERE state IN ('dead', 'cancelled', 'superseded');
-- Retention: finished ops by the time they finished (SQL Server has no block range index).
CREATE INDEX IX_outbox_finished_at ON dbo.outbox_finished (finished_at);
GO

-- 6. The old table's shape, read-only, for readers of ops: each op once, from its queue row
-- or its finished row (never both: the transaction that deletes one inserts the other).
CREATE VIEW dbo.outbox_ops AS
SELECT r.id, r.op_id, r.resource, r.fence, r.owner_id, r.destination, r.idempotency_key,
       r.request_hash, r.order_key, r.partition, r.method, r.path, r.headers, r.content_type,
       r.body, r.expire_with_generation,
       CAST(CASE WHEN q.claimed_by_fence IS NULL THEN 'pending' ELSE 'in_flight' END
            AS varchar(16)) AS state,
       q.attempts, q.next_attempt_at, q.claimed_by_fence, q.claimed_at, q.last_error,
       r.trace_context, r.created_at, CAST(NULL AS datetimeoffset(7)) AS delivered_at,
       CAST(NULL AS datetimeoffset(7)) AS finished_at, q.retry_base_attempts, q.retry_since,
       q.claimed_by_lease, r.trace_state, q.last_attempt_trace
FROM dbo.outbox_requests AS r
INNER JOIN dbo.outbox_queue AS q ON q.id = r.id
UNION ALL
SELECT r.id, r.op_id, r.resource, r.fence, r.owner_id, r.destination, r.idempotency_key,
       r.request_hash, r.order_key, r.partition, r.method, r.path, r.headers, r.content_type,
       r.body, r.expire_with_generation, f.state, f.attempts, f.next_attempt_at,
       CAST(NULL AS bigint), CAST(NULL AS datetimeoffset(7)), f.last_error, r.trace_context,
       r.created_at, CASE WHEN f.state = 'delivered' THEN f.finished_at END, f.finished_at,
       f.retry_base_attempts, f.retry_since, CAST(NULL AS nvarchar(400)), r.trace_state,
       f.last_attempt_trace
FROM dbo.outbox_requests AS r
INNER JOIN dbo.outbox_finished AS f ON f.id = r.id;
GO

-- 7. The SQL API's enqueue (0004_sql_api.sql) writes the request and its queue row in one
-- transaction, and supersedes by moving queue rows to outbox_finished. Its parameters, checks,
-- errors, answers and locking are those of 0004: the lease row read WITH (HOLDLOCK, ROWLOCK)
-- (G4), the key probed WITH (UPDLOCK, HOLDLOCK) (G7). ALTER keeps the grants made on it.
ALTER PROCEDURE outbox.Enqueue
    @Resource nvarchar(max),
    @OwnerId uniqueidentifier,
    @Token bigint,
    @Destination nvarchar(max),
    @Method nvarchar(max),
    @Path nvarchar(max),
    @Headers nvarchar(max) = NULL,
    @Body varbinary(max) = NULL,
    @ContentType nvarchar(max) = NULL,
    @IdempotencyKey nvarchar(max) = NULL,
    @OrderKey nvarchar(max) = NULL,
    @Unordered bit = 0,
    @NotBeforeMs bigint = NULL,
    @SupersedePending bit = 0,
    @ExpireWithGeneration bit = 0,
    @Traceparent nvarchar(max) = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    DECLARE @headerPairs nvarchar(max) = COALESCE(@Headers, N'[]');
    DECLARE @bodyBytes varbinary(max) = COALESCE(@Body, 0x);
    DECLARE @isUnordered bit = COALESCE(@Unordered, 0);
    DECLARE @delayMs bigint = COALESCE(@NotBeforeMs, 0);

    DECLARE @problem nvarchar(2048) = outbox.CheckResource(@Resource);
    IF @problem IS NULL SET @problem = outbox.CheckOwner(@OwnerId, @Token);
    IF @problem IS NULL
        SET @problem = outbox.CheckOp(@Destination, @Method, @Path, @headerPairs, @bodyBytes, @ContentType,
                                      @IdempotencyKey, @OrderKey, @isUnordered, @delayMs,
                                      @Traceparent);
    IF @problem IS NOT NULL THROW 51000, @problem, 1;

    -- Checked, so each fits its column's type exactly (destination, key and method are ASCII).
    DECLARE @leaseResource nvarchar(400) = @Resource;
    DECLARE @destinationName varchar(64) = @Destination;
    DECLARE @key varchar(255) = @IdempotencyKey;
    DECLARE @methodName varchar(8) = UPPER(@Method COLLATE Latin1_General_100_BIN2);
    DECLARE @headersJson nvarchar(max) = outbox.HeadersJson(@headerPairs);
    -- The default order key is the resource; unordered ops have none (G8).
    DECLARE @effectiveOrderKey nvarchar(510) = CASE WHEN @isUnordered = 1 THEN NULL ELSE COALESCE(@OrderKey, @Resource) END;
    DECLARE @expire bit = COALESCE(@ExpireWithGeneration, 0);

    -- A time-ordered op id (UUID version 7), as the Rust producer makes them (see 0004).
    DECLARE @random binary(10) = CRYPT_GEN_RANDOM(10);
    DECLARE @idBytes binary(16) =
        SUBSTRING(CAST(DATEDIFF_BIG(MILLISECOND, CAST('1970-01-01' AS datetime2(7)), SYSUTCDATETIME()) AS binary(8)), 3, 6)
        + CAST((CAST(SUBSTRING(@random, 1, 1) AS int) & 15) | 112 AS binary(1))
        + SUBSTRING(@random, 2, 1)
        + CAST((CAST(SUBSTRING(@random, 3, 1) AS int) & 63) | 128 AS binary(1))
        + SUBSTRING(@random, 4, 7);
    DECLARE @idHex char(32) = CONVERT(char(32), @idBytes, 2);
    DECLARE @opId uniqueidentifier = CAST(CONCAT(SUBSTRING(@idHex, 1, 8), '-', SUBSTRING(@idHex, 9, 4), '-',
                                                 SUBSTRING(@idHex, 13, 4), '-', SUBSTRING(@idHex, 17, 4), '-',
                                                 SUBSTRING(@idHex, 21, 12)) AS uniqueidentifier);
    DECLARE @partition int = outbox.PartitionSlot(
        CASE WHEN @effectiveOrderKey IS NULL THEN @idBytes ELSE outbox.Utf8(@effectiveOrderKey) END);
    DECLARE @hash varbinary(32) = outbox.RequestHash(@methodName, @Path, @headerPairs, @ContentType, @bodyBytes);

    -- The caller's transaction when there is one; otherwise one of this call's own, committed
    -- before it returns (never a caller's: @@TRANCOUNT was 0).
    DECLARE @ownTransaction bit = IIF(@@TRANCOUNT = 0, 1, 0);
    IF @ownTransaction = 1 BEGIN TRANSACTION;

    DECLARE @inserted TABLE (Seq bigint NOT NULL);

    INSERT INTO dbo.outbox_requests (op_id, resource, fence, owner_id, destination,
                                     idempotency_key, request_hash, order_key, partition,
                                     method, path, headers, content_type, body,
                                     expire_with_generation, trace_context)
    OUTPUT inserted.id INTO @inserted (Seq)
    SELECT @opId, @leaseResource, @Token, @OwnerId, @destinationName, @key, @hash, @effectiveOrderKey, @partition,
           @methodName, @Path, @headersJson, @ContentType, @bodyBytes, @expire, @Traceparent
    FROM dbo.outbox_leases WITH (HOLDLOCK, ROWLOCK)
    WHERE resource = @leaseResource
      AND owner_id = @OwnerId
      AND fence = @Token
      AND expires_at > CAST(SYSUTCDATETIME() AS datetimeoffset(7))
      AND NOT EXISTS (
          SELECT 1
          FROM dbo.outbox_requests WITH (UPDLOCK, HOLDLOCK)
          WHERE destination = @destinationName
            AND idempotency_key = @key
      );

    DECLARE @seq bigint = (SELECT Seq FROM @inserted);
    IF @seq IS NOT NULL
    BEGIN
        -- The queue row, in the same transaction as the request (XACT_ABORT ON: both or none).
        INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, fence,
                                      order_key, expire_with_generation)
        VALUES (@seq,
                DATEADD(MILLISECOND, CAST(@delayMs % 1000 AS int),
                        DATEADD(SECOND, CAST(@delayMs / 1000 AS int),
                                CAST(SYSUTCDATETIME() AS datetimeoffset(7)))),
                @partition, @destinationName, @Token, @effectiveOrderKey, @expire);
        IF @SupersedePending = 1
        BEGIN
            -- Older tokens' pending ops of this resource and destination are never sent (G5):
            -- their queue rows become finished rows; as op_supersede_older_pending.sql.
            DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
            DECLARE @gone TABLE (
                id bigint NOT NULL PRIMARY KEY,
                attempts int NOT NULL,
                next_attempt_at datetimeoffset(7) NOT NULL,
                retry_base_attempts int NOT NULL,
                retry_since datetimeoffset(7) NULL,
                last_attempt_trace varchar(55) NULL
            );
            DELETE FROM dbo.outbox_queue
            OUTPUT deleted.id, deleted.attempts, deleted.next_attempt_at,
                   deleted.retry_base_attempts, deleted.retry_since, deleted.last_attempt_trace
            INTO @gone (id, attempts, next_attempt_at, retry_base_attempts, retry_since,
                        last_attempt_trace)
            WHERE destination = @destinationName
              AND fence < @Token
              AND claimed_by_fence IS NULL
              AND id IN (SELECT r.id FROM dbo.outbox_requests AS r
                         WHERE r.resource = @leaseResource);
            INSERT INTO dbo.outbox_finished (id, state, attempts, next_attempt_at, finished_at,
                                             last_error, retry_base_attempts, retry_since,
                                             last_attempt_trace)
            SELECT g.id, 'superseded', g.attempts, g.next_attempt_at, @now,
                   CONCAT(N'superseded by token ', @Token), g.retry_base_attempts,
                   g.retry_since, g.last_attempt_trace
            FROM @gone AS g;
        END;
        IF @ownTransaction = 1 COMMIT TRANSACTION;
        SELECT @opId AS OpId, @seq AS Seq, CAST(0 AS bit) AS Duplicate;
        RETURN;
    END;

    -- Nothing inserted: the lease, or the key. The lease row as lease_check.sql reads it, and
    -- the decision of store/src/enqueue.rs check_lease.
    DECLARE @seen bit = 0;
    DECLARE @seenOwner uniqueidentifier;
    DECLARE @seenFence bigint;
    DECLARE @seenLive bit;
    SELECT @seen = 1,
           @seenOwner = owner_id,
           @seenFence = fence,
           @seenLive = CASE WHEN expires_at > CAST(SYSUTCDATETIME() AS datetimeoffset(7)) THEN 1 ELSE 0 END
    FROM dbo.outbox_leases WITH (HOLDLOCK, ROWLOCK)
    WHERE resource = @leaseResource;

    DECLARE @rejectionReason varchar(16) = CASE
        WHEN @seen = 0 THEN 'no_lease'
        WHEN @seenFence <> @Token THEN 'stale'
        WHEN @seenOwner IS NULL THEN 'no_lease'
        WHEN @seenOwner <> @OwnerId THEN 'stale'
        WHEN @seenLive = 0 THEN 'expired'
    END;
    DECLARE @message nvarchar(2048);
    IF @rejectionReason IS NOT NULL
    BEGIN
        DECLARE @current bigint = CASE WHEN @rejectionReason = 'expired' THEN NULL ELSE @seenFence END;
        BEGIN TRY
            EXEC outbox.RecordRejection
                @Reason = @rejectionReason,
                @Resource = @leaseResource,
                @OwnerId = @OwnerId,
                @Token = @Token,
                @CurrentToken = @current,
                @Destination = @destinationName,
                @IdempotencyKey = @key;
        END TRY
        BEGIN CATCH
            -- Under XACT_ABORT ON the failed call has doomed the transaction; the THROW below
            -- rolls it back as it would anyway.
            PRINT CONCAT(N'fenced-outbox: the ', @rejectionReason, N' rejection of this enqueue was not kept: ',
                         ERROR_MESSAGE());
        END CATCH;
        DECLARE @number int = CASE @rejectionReason WHEN 'stale' THEN 51001 WHEN 'expired' THEN 51002 ELSE 51003 END;
        SET @message = CASE
            WHEN @rejectionReason = 'stale' THEN CONCAT(N'stale; current token ', @current)
            WHEN @rejectionReason = 'expired' THEN N'expired'
            WHEN @current IS NULL THEN N'no lease'
            ELSE CONCAT(N'no lease; current token ', @current)
        END;
        THROW @number, @message, 1;
    END;

    -- The key exists. Read with the probe's own lock (already held): the latest committed row.
    DECLARE @foundSeq bigint;
    DECLARE @foundOpId uniqueidentifier;
    DECLARE @foundHash varbinary(32);
    SELECT @foundSeq = id, @foundOpId = op_id, @foundHash = request_hash
    FROM dbo.outbox_requests WITH (UPDLOCK, HOLDLOCK)
    WHERE destination = @destinationName
      AND idempotency_key = @key;
    IF @foundSeq IS NULL
        THROW 51005, N'retry; the op holding this idempotency key is not visible to this transaction yet', 1;
    IF @foundHash <> @hash
    BEGIN
        SET @message = CONCAT(N'conflict; existing op ', LOWER(CONVERT(nvarchar(36), @foundOpId)));
        THROW 51004, @message, 1;
    END;
    IF @ownTransaction = 1 COMMIT TRANSACTION;
    SELECT @foundOpId AS OpId, @foundSeq AS Seq, CAST(1 AS bit) AS Duplicate;
END;
GO
