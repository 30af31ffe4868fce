-- The fenced enqueue: insert the op's request only if this owner and token hold an unexpired
-- lease by the database clock (G4), and skip it if the (destination, idempotency key) exists
-- (G7); then its queue row (0013_queue_layout.sql), in the same transaction.
-- The lease row is read WITH (HOLDLOCK, ROWLOCK): a locking read even under READ COMMITTED
-- SNAPSHOT (where a plain read takes no lock and reads a version, so a takeover could commit
-- between the check and this transaction's commit), taking a shared lock on the row's key that
-- is held to the end of the transaction (the caller's, or the one this file opens). A
-- takeover's UPDATE of that row needs an exclusive lock and waits for it, so no takeover
-- commits between the check and the commit; a takeover already holding the row is waited for,
-- and the row is then read as it committed. Under locking READ COMMITTED the same holds.
-- The (destination, idempotency key) probe reads the unique index WITH (UPDLOCK, HOLDLOCK): a
-- key-range update lock held to the end of the transaction, so two inserts of one key
-- serialise (the second waits, then sees the first's committed row and inserts nothing)
-- instead of failing with a unique violation.
-- No THROW: this may run inside a caller's transaction, which the caller decides to commit or
-- roll back; an insert that did not happen is told by lease_check.sql and op_find_by_key.sql.
-- The request and its queue row are two statements: inside the caller's transaction they
-- commit with it; outside one (@@TRANCOUNT 0) they run in a transaction of their own,
-- committed here (a nested BEGIN/COMMIT would only count, never commit a caller's work).
-- Either way XACT_ABORT ON (session_setup.sql) rolls both back on any error.
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 op id, @P5 destination,
-- @P6 idempotency key, @P7 request hash (varbinary(32)), @P8 order key, @P9 partition,
-- @P10 method, @P11 path, @P12 headers (JSON text), @P13 content type, @P14 body,
-- @P15 expire_with_generation (bit), @P16 delay in milliseconds (bigint), @P17 traceparent,
-- @P18 tracestate.
-- Returns the new op's id (bigint), or no row when nothing was inserted.
SET NOCOUNT ON;

DECLARE @request TABLE (
    id                      bigint            NOT NULL PRIMARY KEY,
    partition               int               NOT NULL,
    destination             varchar(64)       COLLATE Latin1_General_100_BIN2 NOT NULL,
    fence                   bigint            NOT NULL,
    order_key               nvarchar(510)     COLLATE Latin1_General_100_BIN2 NULL,
    expire_with_generation  bit               NOT NULL
);
DECLARE @ownTransaction bit = IIF(@@TRANCOUNT = 0, 1, 0);
IF @ownTransaction = 1 BEGIN TRANSACTION;

INSERT INTO dbo.outbox_requests (op_id, resource, fence, owner_id, destination,
                                 idempotency_key, request_hash, order_key, partition, method,
                                 path, headers, content_type, body, expire_with_generation,
                                 trace_context, trace_state)
OUTPUT inserted.id, inserted.partition, inserted.destination, inserted.fence,
       inserted.order_key, inserted.expire_with_generation
INTO @request (id, partition, destination, fence, order_key, expire_with_generation)
SELECT @P4, @P1, @P3, @P2, @P5, @P6, @P7, @P8, @P9, @P10, @P11, @P12, @P13, @P14, @P15, @P17,
       @P18
FROM dbo.outbox_leases WITH (HOLDLOCK, ROWLOCK)
WHERE resource = @P1
  AND owner_id = @P2
  AND fence = @P3
  AND expires_at > CAST(SYSUTCDATETIME() AS datetimeoffset(7))
  AND NOT EXISTS (
      SELECT 1
      FROM dbo.outbox_requests WITH (UPDLOCK, HOLDLOCK)
      WHERE destination = CAST(@P5 AS varchar(64))
        AND idempotency_key = CAST(@P6 AS varchar(255))
  );

INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation)
SELECT r.id,
       DATEADD(MILLISECOND, CAST(@P16 % 1000 AS int),
               DATEADD(SECOND, CAST(@P16 / 1000 AS int),
                       CAST(SYSUTCDATETIME() AS datetimeoffset(7)))),
       r.partition, r.destination, r.fence, r.order_key, r.expire_with_generation
FROM @request AS r;

IF @ownTransaction = 1 COMMIT TRANSACTION;

SELECT id FROM @request;
