-- 0004_sql_api: the producer contract as stored procedures in the schema `outbox`, for workers
-- in any language (the seed's .NET worker first): outbox.TryAcquire, outbox.Renew,
-- outbox.Release and outbox.Enqueue, the twins of migrations/postgres/0004_sql_api.sql. They
-- run on the database clock, SYSUTCDATETIME() (G2), and enforce what the Rust producer does on
-- SQL Server, with the same locking as store/sql/mssql/lease_*.sql and
-- op_insert_if_lease_held.sql: the same token rules (G1, G3), the same fenced insert (G4: the
-- insert reads the lease row WITH (HOLDLOCK, ROWLOCK), a shared lock held to the end of the
-- caller's transaction that a takeover waits for, under READ COMMITTED and READ COMMITTED
-- SNAPSHOT alike), the same idempotency rules (G7) and the same input rules as Operation's
-- builder (G10), checked against one shared table (tests/cases/enqueue_validation.json).
--
--   outbox.TryAcquire @Resource, @TtlMs int                -> one row (OwnerId, Token, ExpiresAt),
--                                                             or no row while another owner holds it
--   outbox.Renew @Resource, @OwnerId, @Token, @TtlMs        -> one row (ExpiresAt), or no row when lost
--   outbox.Release @Resource, @OwnerId, @Token              -> one row (Released bit)
--   outbox.Enqueue @Resource, @OwnerId, @Token, @Destination, @Method, @Path, @Headers = NULL,
--       @Body = NULL, @ContentType = NULL, @IdempotencyKey = NULL, @OrderKey = NULL,
--       @Unordered = 0, @NotBeforeMs = NULL, @SupersedePending = 0, @ExpireWithGeneration = 0,
--       @Traceparent = NULL                                 -> one row (OpId, Seq, Duplicate bit)
-- @Headers is a JSON array of [name, value] string pairs (NULL: none); @Body varbinary(max).
-- Text parameters are nvarchar(max) on purpose: T-SQL cuts a value longer than a parameter's
-- declared length without an error, which would turn a 201-character resource into another,
-- valid one. Pass them as nvarchar(max) (SqlClient: SqlDbType.NVarChar, size -1).
--
-- Errors are THROWs (the seed's convention), their messages the shapes that
-- store/src/mssql/error.rs reads:
--   51000 invalid input, 'invalid <field>: <reason>'; nothing was written.
--   51001 stale, 'stale; current token <n>': a newer owner holds the resource (or the owner id
--         does not match). Stop this work; never retry with this token.
--   51002 expired, 'expired': this owner and token, but the lease expired by the database clock.
--   51003 no lease, 'no lease' or 'no lease; current token <n>': never leased, or released.
--   51004 idempotency conflict, 'conflict; existing op <uuid>': the key holds another request.
--   51005 'retry; …': the op holding the key is not visible to this transaction (a SNAPSHOT
--         isolation transaction that began before it committed); retrying the transaction sees
--         it. The key's range lock makes this unreachable under READ COMMITTED (with or without
--         READ_COMMITTED_SNAPSHOT).
-- Every procedure runs with XACT_ABORT ON, so any error rolls the caller's whole transaction
-- back, the business write with it, as an error does on PostgreSQL.
--
-- Transactions: TryAcquire, Renew and Release are the seed's procedures, each in a transaction
-- of its own; call them on their own (autocommit), not inside the business transaction: a lease
-- is only taken once that commits. Enqueue runs in the caller's transaction and never commits
-- the caller's work: the op commits or rolls back with the business write. Called outside any
-- transaction it opens one of its own for its statements (so supersede_pending stays atomic
-- with the insert, as the Rust producer's enqueue is) and commits it before it returns.
--
-- The rejection record (G4): a rejected enqueue (51001-51003) is kept in dbo.outbox_rejections
-- (stage 'sql_enqueue'; never the body or header values), and that record must survive the
-- caller's rollback, which the THROW forces. SQL Server has no autonomous transactions; a
-- remote procedure call over a loopback linked server runs in its own session and, with
-- 'remote proc transaction promotion' off, in its own transaction, which commits whatever the
-- caller's does. So Enqueue calls outbox.KeepRejection through a linked server named
-- OUTBOX_LOOPBACK when an operator has created one, once per instance, as a sysadmin:
--
--     DECLARE @self sysname = @@SERVERNAME;  -- or N'localhost', or N'host,port'
--     EXEC sp_addlinkedserver @server = N'OUTBOX_LOOPBACK', @srvproduct = N'',
--          @provider = N'MSOLEDBSQL', @datasrc = @self;
--     EXEC sp_serveroption N'OUTBOX_LOOPBACK', N'rpc out', N'true';
--     EXEC sp_serveroption N'OUTBOX_LOOPBACK', N'remote proc transaction promotion', N'false';
--     EXEC sp_serveroption N'OUTBOX_LOOPBACK', N'connect timeout', N'5';
--     EXEC sp_serveroption N'OUTBOX_LOOPBACK', N'query timeout', N'10';
--     -- every local login reaches the loopback as one login that may only keep rejections:
--     EXEC sp_addlinkedsrvlogin @rmtsrvname = N'OUTBOX_LOOPBACK', @useself = N'false',
--          @locallogin = NULL, @rmtuser = N'outbox_rejections', @rmtpassword = N'<password>';
--     -- and in each outbox database:
--     --   CREATE USER outbox_rejections FOR LOGIN outbox_rejections;
--     --   GRANT EXECUTE ON OBJECT::outbox.KeepRejection TO outbox_rejections;
--
-- Enqueue checks that OUTBOX_LOOPBACK exists with 'rpc out' on and promotion off (with
-- promotion on, the call would join the caller's transaction through MSDTC and roll back with
-- it), calls OUTBOX_LOOPBACK.<this database>.outbox.KeepRejection, and checks that the record
-- was written on this server and database. Otherwise, or when the call fails, nothing durable
-- is recorded: Enqueue says so in an informational message (PRINT, SqlConnection.InfoMessage:
-- 'fenced-outbox: the <reason> rejection of this enqueue was not kept: <why>') and still THROWs
-- the rejection. Azure SQL Database has no linked servers (Managed Instance has).
--
-- Permissions: the schema is owned by dbo, like the tables, so ownership chaining lets a caller
-- with EXECUTE on the schema (GRANT EXECUTE ON SCHEMA::outbox TO <role>) use the procedures
-- without any right on the tables. Callers that must not write rejection records themselves:
-- DENY EXECUTE ON OBJECT::outbox.KeepRejection TO <role>.
--
-- Settings (optional rows of outbox.Settings; an absent row is the default, as the Rust
-- StoreOptions defaults): lease_min_ttl_ms and lease_max_ttl_ms, the lease TTL bounds, default
-- 5000 and 300000, within 1 ms..1 day; max_body_bytes, the body limit, default 1048576 (1 MiB),
-- at most 16777216 (16 MiB). E.g. INSERT INTO outbox.Settings VALUES ('lease_max_ttl_ms', 600000).
--
-- Needs SQL Server 2019 or later (or Azure SQL): the request hash and the partition slot hash
-- UTF-8 bytes, which T-SQL produces by casting nvarchar to varchar in a UTF-8 collation
-- (Latin1_General_100_BIN2_UTF8). Database compatibility level 130 or more (OPENJSON), as the
-- other SQL Server statements of the outbox need. A session needs ANSI_WARNINGS, ANSI_PADDING and
-- CONCAT_NULL_YIELDS_NULL on (every current driver's default; ARITHABORT follows ANSI_WARNINGS)
-- to write dbo.outbox_ops, whose filtered indexes refuse other sessions with error 1934.
-- Every text comparison below names its collation: the database default may ignore case or
-- accents, or count surrogate pairs as one character or as two.
-- Babelfish for PostgreSQL (4.3) has neither the _SC nor the _UTF8 collations used below, and
-- ignores CONVERT's binary styles: no form both run counts characters or hashes UTF-8 bytes,
-- so these procedures keep SQL Server's and do not run there (the store refuses Babelfish for
-- production anyway: it ignores the locking hints the fence needs).
-- Batches are separated by lines holding only GO; the migration runner sends them in order
-- inside the migration transaction (store/src/mssql/driver.rs).

CREATE SCHEMA outbox AUTHORIZATION dbo;
GO

-- Optional overrides of the defaults above, one row per setting; the table checks each value's
-- range itself, and the procedures check that the TTL bounds do not cross.
CREATE TABLE outbox.Settings (
    Name   varchar(32) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT PK_outbox_Settings PRIMARY KEY,
    Value  bigint      NOT NULL,
    CONSTRAINT CK_outbox_Settings_known CHECK (
        (Name IN ('lease_min_ttl_ms', 'lease_max_ttl_ms') AND Value BETWEEN 1 AND 86400000)
        OR (Name = 'max_body_bytes' AND Value BETWEEN 1 AND 16777216)
    )
);
GO

-- A setting from outbox.Settings, or its default when the row is absent.
CREATE FUNCTION outbox.Setting(@Name varchar(32), @Default bigint)
RETURNS bigint
AS
BEGIN
    RETURN ISNULL((SELECT s.Value FROM outbox.Settings AS s WHERE s.Name = @Name), @Default);
END;
GO

-- The number of characters (Unicode scalar values, Rust's chars().count()) in a text without
-- lone surrogates. LEN counts a surrogate pair as one character only under a
-- supplementary-character (_SC) collation, and ignores trailing spaces: hence the '.' appended
-- and taken off again.
CREATE FUNCTION outbox.CharCount(@Text nvarchar(max))
RETURNS bigint
AS
BEGIN
    RETURN LEN(CONCAT(@Text, N'.') COLLATE Latin1_General_100_CI_AS_SC) - 1;
END;
GO

-- 1 when the text holds a surrogate code unit that is not half of a pair: not a Unicode scalar
-- value, so no Rust string can hold it and it has no UTF-8 form. Compared code unit by code unit
-- (a binary collation without _SC); the '.' around the text stands for the ends.
CREATE FUNCTION outbox.HasLoneSurrogate(@Text nvarchar(max))
RETURNS bit
AS
BEGIN
    -- The surrogate ranges, written as UTF-16LE bytes so no collation can reinterpret them.
    DECLARE @high nvarchar(3) = CONCAT(CONVERT(nchar(1), 0x00D8), N'-', CONVERT(nchar(1), 0xFFDB));
    DECLARE @low nvarchar(3) = CONCAT(CONVERT(nchar(1), 0x00DC), N'-', CONVERT(nchar(1), 0xFFDF));
    DECLARE @framed nvarchar(max) = CONCAT(N'.', @Text, N'.');
    RETURN CASE
        WHEN @framed COLLATE Latin1_General_100_BIN2 LIKE CONCAT(N'%[', @high, N'][^', @low, N']%') THEN 1
        WHEN @framed COLLATE Latin1_General_100_BIN2 LIKE CONCAT(N'%[^', @high, N'][', @low, N']%') THEN 1
        ELSE 0
    END;
END;
GO

-- 1 when the text holds a control character (Rust's char::is_control: U+0000-U+001F and
-- U+007F-U+009F). NUL is looked for on its own: only a binary collation compares it at all.
CREATE FUNCTION outbox.HasControl(@Text nvarchar(max))
RETURNS bit
AS
BEGIN
    RETURN CASE
        WHEN CHARINDEX(NCHAR(0), @Text COLLATE Latin1_General_100_BIN2) > 0 THEN 1
        WHEN @Text COLLATE Latin1_General_100_BIN2
             LIKE CONCAT(N'%[', NCHAR(1), N'-', NCHAR(31), NCHAR(127), N'-', NCHAR(159), N']%') THEN 1
        ELSE 0
    END;
END;
GO

-- The UTF-8 bytes of a text without lone surrogates, as Rust's str::as_bytes: nvarchar cast to
-- varchar in a UTF-8 collation (SQL Server 2019 and later), then read as bytes. Casting
-- nvarchar straight to varbinary would give UTF-16 bytes.
CREATE FUNCTION outbox.Utf8(@Text nvarchar(max))
RETURNS varbinary(max)
AS
BEGIN
    RETURN CAST(CAST(@Text COLLATE Latin1_General_100_BIN2_UTF8 AS varchar(max)) AS varbinary(max));
END;
GO

-- The refusal of a resource name (ResourceName::new), or NULL: 1..=200 characters, no control
-- character, no lone surrogate, not ending in a space (SQL Server's = ignores trailing spaces,
-- so 'r ' would share the lease of 'r', as store/src/mssql/lease.rs refuses too), and not a
-- dispatcher partition lease (those are outbox-dispatcher's, G9).
CREATE FUNCTION outbox.CheckResource(@Resource nvarchar(max))
RETURNS nvarchar(2048)
AS
BEGIN
    DECLARE @chars bigint = outbox.CharCount(@Resource);
    RETURN CASE
        WHEN @Resource IS NULL OR DATALENGTH(@Resource) = 0
            THEN N'invalid resource: must not be empty'
        WHEN @chars > 200
            THEN CONCAT(N'invalid resource: is ', @chars, N' characters long, the limit is 200')
        WHEN outbox.HasControl(@Resource) = 1
            THEN N'invalid resource: contains a control character'
        WHEN outbox.HasLoneSurrogate(@Resource) = 1
            THEN N'invalid resource: contains a lone surrogate, which is not a character'
        WHEN UNICODE(RIGHT(@Resource COLLATE Latin1_General_100_BIN2, 1)) = 32
            THEN N'invalid resource: ends with a space, which SQL Server ignores when it compares names: it would share the lease of the name without it'
        WHEN LEFT(@Resource COLLATE Latin1_General_100_BIN2, 11) = N'dispatcher/'
            THEN N'invalid resource: is a dispatcher partition lease: only outbox-dispatcher takes those'
    END;
END;
GO

-- The refusal of the owner id and token a caller presents for a lease, or NULL: both required.
CREATE FUNCTION outbox.CheckOwner(@OwnerId uniqueidentifier, @Token bigint)
RETURNS nvarchar(2048)
AS
BEGIN
    RETURN CASE
        WHEN @OwnerId IS NULL THEN N'invalid owner_id: is required (the OwnerId outbox.TryAcquire returned)'
        WHEN @Token IS NULL THEN N'invalid token: is required (the Token outbox.TryAcquire returned)'
    END;
END;
GO

-- The refusal of a lease time to live in milliseconds (TtlBounds::check), or NULL.
CREATE FUNCTION outbox.CheckTtl(@TtlMs int)
RETURNS nvarchar(2048)
AS
BEGIN
    DECLARE @min bigint = outbox.Setting('lease_min_ttl_ms', 5000);
    DECLARE @max bigint = outbox.Setting('lease_max_ttl_ms', 300000);
    RETURN CASE
        WHEN @min > @max
            THEN CONCAT(N'invalid lease_min_ttl_ms: ', @min, N' (outbox.Settings) is above lease_max_ttl_ms, ', @max)
        WHEN @TtlMs IS NULL
            THEN N'invalid ttl: is required (@TtlMs, in milliseconds)'
        WHEN @TtlMs < @min OR @TtlMs > @max
            THEN CONCAT(N'invalid ttl: ', @TtlMs, N' ms is outside the allowed ', @min, N'..=', @max, N' ms')
    END;
END;
GO

-- The refusal of a header value or content type (check_header_value), or NULL: at most 8192
-- bytes, visible ASCII, spaces and tabs. The reason never quotes the value: it may be sensitive.
CREATE FUNCTION outbox.CheckHeaderValue(@Field nvarchar(32), @Value nvarchar(max))
RETURNS nvarchar(2048)
AS
BEGIN
    DECLARE @bytes bigint = DATALENGTH(outbox.Utf8(@Value));
    RETURN CASE
        WHEN @bytes > 8192
            THEN CONCAT(N'invalid ', @Field, N': is ', @bytes, N' bytes, the limit is 8192')
        WHEN CHARINDEX(NCHAR(13), @Value COLLATE Latin1_General_100_BIN2) > 0
             OR CHARINDEX(NCHAR(10), @Value COLLATE Latin1_General_100_BIN2) > 0
            THEN CONCAT(N'invalid ', @Field, N': contains CR or LF')
        WHEN @Value COLLATE Latin1_General_100_BIN2 LIKE CONCAT(N'%[^', NCHAR(9), N' -~]%')
            THEN CONCAT(N'invalid ', @Field, N': may hold only visible ASCII, spaces and tabs')
    END;
END;
GO

-- The refusal of a header name (check_header_name), or NULL: a token of 1..=128 characters
-- that the dispatcher does not set itself and that is not a credential.
CREATE FUNCTION outbox.CheckHeaderName(@Name nvarchar(max))
RETURNS nvarchar(2048)
AS
BEGIN
    IF @Name IS NULL
       OR DATALENGTH(@Name) NOT BETWEEN 2 AND 256
       OR @Name COLLATE Latin1_General_100_BIN2 LIKE N'%[^A-Za-z0-9!#$%&''*+.^_`|~-]%'
        RETURN N'invalid header_name: is not a valid header name (1..=128 token characters)';
    -- Token characters only from here on, so LOWER is plain ASCII lower-casing.
    DECLARE @why nvarchar(200) = (
        SELECT r.Why
        FROM (VALUES
            (N'host', N'the dispatcher sends to the destination''s configured base URL'),
            (N'content-length', N'the dispatcher frames the body itself'),
            (N'transfer-encoding', N'the dispatcher frames the body itself'),
            (N'connection', N'connection management is the dispatcher''s'),
            (N'keep-alive', N'connection management is the dispatcher''s'),
            (N'upgrade', N'connection management is the dispatcher''s'),
            (N'te', N'connection management is the dispatcher''s'),
            (N'trailer', N'connection management is the dispatcher''s'),
            (N'idempotency-key', N'the dispatcher sends the op''s idempotency key on every attempt'),
            (N'x-fencing-token', N'the dispatcher sends the op''s fencing token'),
            (N'traceparent', N'pass the trace context as @Traceparent'),
            (N'tracestate', N'pass the trace context as @Traceparent'),
            (N'content-type', N'pass it as @ContentType'),
            (N'authorization', N'credentials belong in the dispatcher''s destination config, never in op rows'),
            (N'proxy-authorization', N'credentials belong in the dispatcher''s destination config, never in op rows')
        ) AS r (Name, Why)
        WHERE r.Name = LOWER(@Name COLLATE Latin1_General_100_BIN2)
    );
    IF @why IS NULL
        SET @why = CASE
            WHEN LOWER(LEFT(@Name COLLATE Latin1_General_100_BIN2, 9)) = N'x-outbox-'
                THEN N'X-Outbox-* headers are the dispatcher''s'
            WHEN LOWER(LEFT(@Name COLLATE Latin1_General_100_BIN2, 8)) = N'webhook-'
                THEN N'webhook-* headers are the dispatcher''s Standard Webhooks signature'
        END;
    RETURN CASE WHEN @why IS NOT NULL THEN CONCAT(N'invalid header_name: ', @Name, N' is reserved: ', @why) END;
END;
GO

-- The elements of a headers array, in order: each element's JSON type and item count, and the
-- JSON types and texts of its first two items. Only for text that is a JSON array
-- (outbox.CheckHeaders makes sure); OPENJSON of NULL (a non-array element) yields no row.
CREATE FUNCTION outbox.HeaderList(@Headers nvarchar(max))
RETURNS TABLE
AS
RETURN
SELECT
    CAST(h.[key] AS int) AS Position,
    h.type AS PairType,
    (SELECT COUNT(*) FROM OPENJSON(CASE WHEN h.type = 4 THEN h.value END)) AS Items,
    n.value AS Name,
    n.type AS NameType,
    v.value AS Value,
    v.type AS ValueType
FROM OPENJSON(@Headers) AS h
OUTER APPLY (
    SELECT e.value, e.type
    FROM OPENJSON(CASE WHEN h.type = 4 THEN h.value END) AS e
    WHERE e.[key] = N'0'
) AS n
OUTER APPLY (
    SELECT e.value, e.type
    FROM OPENJSON(CASE WHEN h.type = 4 THEN h.value END) AS e
    WHERE e.[key] = N'1'
) AS v;
GO

-- The refusal of the headers (check_headers), or NULL: a JSON array of at most 64 [name, value]
-- string pairs, the first bad pair in order refused by its name, then its value.
CREATE FUNCTION outbox.CheckHeaders(@Headers nvarchar(max))
RETURNS nvarchar(2048)
AS
BEGIN
    -- The first character that is not JSON white space must open an array. OPENJSON fails on
    -- text that is not JSON, so it only ever sees @array, NULL (no row) unless the text is an
    -- array: a guard inside the expression holds even where SQL Server inlines this function.
    DECLARE @start bigint = PATINDEX(CONCAT(N'%[^ ', NCHAR(9), NCHAR(10), NCHAR(13), N']%'),
                                     @Headers COLLATE Latin1_General_100_BIN2);
    DECLARE @array nvarchar(max) = CASE
        WHEN ISJSON(@Headers) = 1 AND @start > 0 AND SUBSTRING(@Headers, @start, 1) = N'[' THEN @Headers
    END;
    IF @array IS NULL
        RETURN N'invalid headers: must be a JSON array of [name, value] pairs';
    DECLARE @count int = (SELECT COUNT(*) FROM OPENJSON(@array));
    IF @count > 64
        RETURN CONCAT(N'invalid headers: ', @count, N' headers, the limit is 64');
    RETURN (
        SELECT TOP (1) p.Problem
        FROM outbox.HeaderList(@array) AS h
        CROSS APPLY (
            SELECT CASE
                WHEN h.PairType <> 4 OR h.Items <> 2 OR h.NameType <> 1 OR h.ValueType <> 1
                    THEN N'invalid headers: each header must be a [name, value] pair of strings'
                ELSE ISNULL(outbox.CheckHeaderName(h.Name),
                            outbox.CheckHeaderValue(N'header_value', h.Value))
            END AS Problem
        ) AS p
        WHERE p.Problem IS NOT NULL
        ORDER BY h.Position
    );
END;
GO

-- Checked headers as the Rust producer stores them: a compact JSON array of [name, value]
-- string pairs in order, whatever white space or escapes the caller's text used (the table's
-- CHECK wants the array's [ first). STRING_ESCAPE writes / as \/, which JSON reads as /.
CREATE FUNCTION outbox.HeadersJson(@Headers nvarchar(max))
RETURNS nvarchar(max)
AS
BEGIN
    RETURN CONCAT(N'[', (
        SELECT STRING_AGG(
                   CONCAT(N'["', STRING_ESCAPE(h.Name, 'json'), N'","', STRING_ESCAPE(h.Value, 'json'), N'"]'),
                   N',') WITHIN GROUP (ORDER BY h.Position)
        FROM outbox.HeaderList(@Headers) AS h
    ), N']');
END;
GO

-- The refusal of a path below the destination's base URL (check_path), or NULL: one leading /,
-- at most 2048 bytes, visible ASCII, no \ or #, no .. segment (also percent-encoded) before the
-- query.
CREATE FUNCTION outbox.CheckPath(@Path nvarchar(max))
RETURNS nvarchar(2048)
AS
BEGIN
    DECLARE @bytes bigint = DATALENGTH(outbox.Utf8(@Path));
    -- The route (before any ?), lower-cased with %2e decoded, and closed by a /: a .. segment
    -- is then a /../ in it.
    DECLARE @route nvarchar(max) = CONCAT(
        REPLACE(LOWER(LEFT(@Path COLLATE Latin1_General_100_BIN2,
                           CHARINDEX(N'?', CONCAT(@Path, N'?') COLLATE Latin1_General_100_BIN2) - 1)),
                N'%2e', N'.'),
        N'/');
    RETURN CASE
        WHEN @Path IS NULL OR LEFT(@Path COLLATE Latin1_General_100_BIN2, 1) <> N'/'
            THEN N'invalid path: must start with / (a path below the destination''s base URL, not a URL)'
        WHEN LEFT(@Path COLLATE Latin1_General_100_BIN2, 2) = N'//'
            THEN N'invalid path: must not start with // (that names a host)'
        WHEN @bytes > 2048
            THEN CONCAT(N'invalid path: is ', @bytes, N' bytes long, the limit is 2048')
        WHEN @Path COLLATE Latin1_General_100_BIN2 LIKE N'%[^!-~]%'
            THEN N'invalid path: contains a space, control or non-ASCII character: percent-encode it'
        WHEN CHARINDEX(N'\', @Path COLLATE Latin1_General_100_BIN2) > 0
             OR CHARINDEX(N'#', @Path COLLATE Latin1_General_100_BIN2) > 0
            THEN N'invalid path: contains \ or #, which destinations read differently'
        WHEN @route COLLATE Latin1_General_100_BIN2 LIKE N'%/../%'
            THEN N'invalid path: must not contain a .. segment'
    END;
END;
GO

-- The refusal of an op's inputs, as Operation's builder checks them and in its order, or NULL.
-- @Headers and @Body are given (NULL already read as none), @Unordered is 0 or 1.
CREATE FUNCTION outbox.CheckOp(
    @Destination nvarchar(max),
    @Method nvarchar(max),
    @Path nvarchar(max),
    @Headers nvarchar(max),
    @Body varbinary(max),
    @ContentType nvarchar(max),
    @IdempotencyKey nvarchar(max),
    @OrderKey nvarchar(max),
    @Unordered bit,
    @NotBeforeMs bigint,
    @Traceparent nvarchar(max)
)
RETURNS nvarchar(2048)
AS
BEGIN
    DECLARE @problem nvarchar(2048);
    IF @Destination IS NULL
       OR DATALENGTH(@Destination) NOT BETWEEN 2 AND 128
       OR @Destination COLLATE Latin1_General_100_BIN2 LIKE N'%[^a-z0-9_-]%'
        RETURN N'invalid destination: must be 1..=64 of a-z, 0-9, _ and -: it names a configured destination, not a host';
    IF @Method IS NULL
       OR DATALENGTH(@Method) = 0
       OR @Method COLLATE Latin1_General_100_BIN2 LIKE N'%[^A-Za-z]%'
       OR UPPER(@Method COLLATE Latin1_General_100_BIN2) NOT IN (N'GET', N'POST', N'PUT', N'PATCH', N'DELETE')
        RETURN N'invalid method: is not one of GET, POST, PUT, PATCH, DELETE';
    SET @problem = ISNULL(outbox.CheckPath(@Path), N'');
    IF @problem <> N'' RETURN @problem;
    SET @problem = ISNULL(outbox.CheckHeaders(@Headers), N'');
    IF @problem <> N'' RETURN @problem;
    IF @ContentType IS NOT NULL
    BEGIN
        SET @problem = ISNULL(outbox.CheckHeaderValue(N'content_type', @ContentType), N'');
        IF @problem <> N'' RETURN @problem;
        IF DATALENGTH(REPLACE(REPLACE(@ContentType COLLATE Latin1_General_100_BIN2, N' ', N''), NCHAR(9), N'')) = 0
            RETURN N'invalid content_type: must not be empty';
    END;
    IF @IdempotencyKey IS NULL
        RETURN N'invalid idempotency_key: is required';
    DECLARE @keyBytes bigint = DATALENGTH(outbox.Utf8(@IdempotencyKey));
    IF @keyBytes NOT BETWEEN 1 AND 255
        RETURN CONCAT(N'invalid idempotency_key: must be 1..=255 characters, got ', @keyBytes);
    IF @IdempotencyKey COLLATE Latin1_General_100_BIN2 LIKE N'%[^!-~]%'
        RETURN N'invalid idempotency_key: may hold only visible ASCII characters';
    IF @OrderKey IS NOT NULL
    BEGIN
        DECLARE @orderChars bigint = outbox.CharCount(@OrderKey);
        IF @Unordered = 1
            RETURN N'invalid order_key: cannot be combined with unordered';
        IF DATALENGTH(@OrderKey) = 0 OR @orderChars > 255
            RETURN CONCAT(N'invalid order_key: must be 1..=255 characters, got ', @orderChars);
        IF outbox.HasControl(@OrderKey) = 1
            RETURN N'invalid order_key: contains a control character';
        IF outbox.HasLoneSurrogate(@OrderKey) = 1
            RETURN N'invalid order_key: contains a lone surrogate, which is not a character';
    END;
    IF @NotBeforeMs < 0
        RETURN N'invalid not_before: must not be negative';
    IF @NotBeforeMs > 31536000000
        RETURN CONCAT(N'invalid not_before: ', @NotBeforeMs, N' ms is beyond the limit of 365 days');
    IF @Traceparent IS NOT NULL
       AND (DATALENGTH(@Traceparent) <> 110
            OR @Traceparent COLLATE Latin1_General_100_BIN2 NOT LIKE CONCAT(
                N'00-', REPLICATE(N'[0-9a-f]', 32), N'-', REPLICATE(N'[0-9a-f]', 16), N'-[0-9a-f][0-9a-f]')
            OR SUBSTRING(@Traceparent, 4, 32) = REPLICATE(N'0', 32)
            OR SUBSTRING(@Traceparent, 37, 16) = REPLICATE(N'0', 16))
        RETURN N'invalid traceparent: must be 00-<32 hex>-<16 hex>-<2 hex> with non-zero ids';
    DECLARE @limit bigint = outbox.Setting('max_body_bytes', 1048576);
    IF DATALENGTH(@Body) > @limit
        RETURN CONCAT(N'invalid body: is ', DATALENGTH(@Body), N' bytes, the limit is ', @limit);
    RETURN NULL;
END;
GO

-- One length-prefixed part of the request hash: the length as 8 bytes big-endian (a bigint cast
-- to binary is big-endian), then the bytes.
CREATE FUNCTION outbox.HashPart(@Bytes varbinary(max))
RETURNS varbinary(max)
AS
BEGIN
    RETURN CAST(CAST(DATALENGTH(@Bytes) AS bigint) AS binary(8)) + @Bytes;
END;
GO

-- SHA-256 over method, path, header count, each header's name and value, content type (or '')
-- and body, each part length-prefixed and text as UTF-8: Operation::request_hash byte for byte,
-- so a Rust and a SQL producer agree on "the same request" for an idempotency key (G7). The
-- header parts are joined in array order as hex (STRING_AGG … WITHIN GROUP is ordered; T-SQL
-- has no ordered aggregate over varbinary). Takes checked input (outbox.CheckOp).
CREATE FUNCTION outbox.RequestHash(
    @Method nvarchar(max),
    @Path nvarchar(max),
    @Headers nvarchar(max),
    @ContentType nvarchar(max),
    @Body varbinary(max)
)
RETURNS varbinary(32)
AS
BEGIN
    DECLARE @count bigint = (SELECT COUNT_BIG(*) FROM OPENJSON(@Headers));
    DECLARE @pairs varbinary(max) = CONVERT(varbinary(max), (
        SELECT STRING_AGG(
                   CONVERT(varchar(max),
                           outbox.HashPart(outbox.Utf8(h.Name)) + outbox.HashPart(outbox.Utf8(h.Value)),
                           2),
                   '') WITHIN GROUP (ORDER BY h.Position)
        FROM outbox.HeaderList(@Headers) AS h
    ), 2);
    RETURN HASHBYTES('SHA2_256',
        outbox.HashPart(outbox.Utf8(@Method))
        + outbox.HashPart(outbox.Utf8(@Path))
        + outbox.HashPart(CAST(@count AS binary(8)))
        + COALESCE(@pairs, 0x)
        + outbox.HashPart(outbox.Utf8(COALESCE(@ContentType, N'')))
        + outbox.HashPart(COALESCE(@Body, 0x)));
END;
GO

-- The partition slot (op::partition_slot): FNV-1a (32 bits) of the order key's UTF-8 bytes, or
-- of the op id's 16 bytes in RFC 4122 order when unordered, modulo 1024. In bigint arithmetic:
-- a 32-bit hash times the 25-bit prime fits, and & 0xFFFFFFFF is the u32 wrap. Same key, same
-- slot, same partition (G8).
CREATE FUNCTION outbox.PartitionSlot(@Bytes varbinary(max))
RETURNS int
AS
BEGIN
    DECLARE @mask bigint = 4294967295;
    DECLARE @prime bigint = 16777619;
    DECLARE @hash bigint = 2166136261;
    DECLARE @length bigint = DATALENGTH(@Bytes);
    DECLARE @i bigint = 1;
    WHILE @i <= @length
    BEGIN
        SET @hash = ((@hash ^ CAST(SUBSTRING(@Bytes, @i, 1) AS int)) * @prime) & @mask;
        SET @i += 1;
    END;
    RETURN CAST(@hash % 1024 AS int);
END;
GO

-- The remote half of keeping a rejection (G4): run through OUTBOX_LOOPBACK in a session and a
-- transaction of its own, so it commits whatever the caller's transaction does. Never the body
-- or header values. @KeptIn says where it wrote (server/database), for the caller to check.
CREATE PROCEDURE outbox.KeepRejection
    @Reason varchar(16),
    @Resource nvarchar(400),
    @OwnerId uniqueidentifier,
    @Token bigint,
    @CurrentToken bigint,
    @Destination varchar(64),
    @IdempotencyKey varchar(255),
    @Stage varchar(32),
    @KeptIn nvarchar(300) OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    INSERT INTO dbo.outbox_rejections (resource, owner_id, fence, current_fence, destination,
                                       idempotency_key, stage, reason)
    VALUES (@Resource, @OwnerId, @Token, @CurrentToken, @Destination, @IdempotencyKey, @Stage,
            @Reason);

    SET @KeptIn = CONCAT(@@SERVERNAME, N'/', DB_NAME());
END;
GO

-- Keeps a rejected enqueue for operators through the loopback linked server OUTBOX_LOOPBACK (see
-- the header) when it is set up so that the record outlives the caller's transaction; otherwise
-- keeps nothing and says why in an informational message. Never fakes a record: one written
-- inside the caller's transaction would roll back with it. Errors of the call itself reach the
-- caller (outbox.Enqueue catches them and reports them the same way).
CREATE PROCEDURE outbox.RecordRejection
    @Reason varchar(16),
    @Resource nvarchar(400),
    @OwnerId uniqueidentifier,
    @Token bigint,
    @CurrentToken bigint,
    @Destination varchar(64),
    @IdempotencyKey varchar(255)
AS
BEGIN
    SET NOCOUNT ON;

    DECLARE @here nvarchar(300) = CONCAT(@@SERVERNAME, N'/', DB_NAME());
    DECLARE @kept nvarchar(300);
    DECLARE @why nvarchar(1000);

    IF NOT EXISTS (SELECT 1 FROM sys.servers WHERE name = N'OUTBOX_LOOPBACK' AND is_linked = 1)
        SET @why = N'there is no linked server OUTBOX_LOOPBACK (see migrations/mssql/0004_sql_api.sql)';
    ELSE IF EXISTS (
        SELECT 1
        FROM sys.servers
        WHERE name = N'OUTBOX_LOOPBACK'
          AND (is_rpc_out_enabled = 0 OR is_remote_proc_transaction_promotion_enabled = 1)
    )
        SET @why = N'OUTBOX_LOOPBACK needs ''rpc out'' on and ''remote proc transaction promotion'' off';
    ELSE
    BEGIN
        -- The procedure's four-part name: a fixed server, this database (QUOTENAME), a fixed
        -- schema and name; every value goes as a parameter.
        DECLARE @procedure nvarchar(600) = CONCAT(N'OUTBOX_LOOPBACK.', QUOTENAME(DB_NAME()),
                                                  N'.outbox.KeepRejection');
        EXEC @procedure
            @Reason = @Reason,
            @Resource = @Resource,
            @OwnerId = @OwnerId,
            @Token = @Token,
            @CurrentToken = @CurrentToken,
            @Destination = @Destination,
            @IdempotencyKey = @IdempotencyKey,
            @Stage = 'sql_enqueue',
            @KeptIn = @kept OUTPUT;
        IF @kept IS NULL OR @kept <> @here
            SET @why = CONCAT(N'OUTBOX_LOOPBACK wrote it to ', COALESCE(@kept, N'(nowhere)'),
                              N', not to ', @here);
    END;

    IF @why IS NOT NULL
        PRINT CONCAT(N'fenced-outbox: the ', @Reason, N' rejection of this enqueue was not kept: ', @why);
END;
GO

-- TryAcquire: the lease when the resource is free, released or expired by the database clock,
-- with a fresh owner id and a token larger than any before (G1, G2); no row when another owner
-- holds it. The body is lease_acquire_if_free.sql's: UPDLOCK, HOLDLOCK on the primary key range
-- (held to the commit even where the row does not exist yet), so concurrent first acquisitions
-- create one row and one winner; fence + 1 in the same transaction; @now read before any lock
-- wait, so a late grant only gets a shorter lease.
CREATE PROCEDURE outbox.TryAcquire
    @Resource nvarchar(max),
    @TtlMs int
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    DECLARE @problem nvarchar(2048) = outbox.CheckResource(@Resource);
    IF @problem IS NULL SET @problem = outbox.CheckTtl(@TtlMs);
    IF @problem IS NOT NULL THROW 51000, @problem, 1;

    DECLARE @leaseResource nvarchar(400) = @Resource;
    DECLARE @owner uniqueidentifier = NEWID();

    BEGIN TRANSACTION;

    DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

    IF NOT EXISTS (
        SELECT 1
        FROM dbo.outbox_leases WITH (UPDLOCK, HOLDLOCK)
        WHERE resource = @leaseResource
    )
    BEGIN
        INSERT INTO dbo.outbox_leases (resource, owner_id, expires_at, fence)
        VALUES (@leaseResource, NULL, NULL, 0);
    END;

    UPDATE dbo.outbox_leases
    SET owner_id = @owner,
        expires_at = DATEADD(MILLISECOND, @TtlMs, @now),
        fence = fence + 1
    OUTPUT inserted.owner_id AS OwnerId, inserted.fence AS Token, inserted.expires_at AS ExpiresAt
    WHERE resource = @leaseResource
      AND (owner_id IS NULL OR expires_at <= @now);

    COMMIT TRANSACTION;
END;
GO

-- Renew: the new expiry, keeping the token; no row when the lease is lost, expired (even if
-- nobody took it) or held by a newer owner (G3). As lease_renew_if_owner.sql: the row is locked
-- first (UPDLOCK, HOLDLOCK), and only then is the time read, so a lease that expired while this
-- waited for an enqueue's lock is not revived.
CREATE PROCEDURE outbox.Renew
    @Resource nvarchar(max),
    @OwnerId uniqueidentifier,
    @Token bigint,
    @TtlMs int
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    DECLARE @problem nvarchar(2048) = outbox.CheckResource(@Resource);
    IF @problem IS NULL SET @problem = outbox.CheckOwner(@OwnerId, @Token);
    IF @problem IS NULL SET @problem = outbox.CheckTtl(@TtlMs);
    IF @problem IS NOT NULL THROW 51000, @problem, 1;

    DECLARE @leaseResource nvarchar(400) = @Resource;

    BEGIN TRANSACTION;

    DECLARE @locked int;
    SELECT @locked = 1
    FROM dbo.outbox_leases WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
    WHERE resource = @leaseResource;

    DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

    UPDATE dbo.outbox_leases
    SET expires_at = DATEADD(MILLISECOND, @TtlMs, @now)
    OUTPUT inserted.expires_at AS ExpiresAt
    WHERE resource = @leaseResource
      AND owner_id = @OwnerId
      AND fence = @Token
      AND expires_at > @now;

    COMMIT TRANSACTION;
END;
GO

-- Release: Released = 1 when this owner and token held the lease and gave it up; the fence is
-- kept, so the next owner gets a larger token (G1, G3). As lease_release_if_owner.sql.
CREATE PROCEDURE outbox.Release
    @Resource nvarchar(max),
    @OwnerId uniqueidentifier,
    @Token bigint
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    DECLARE @problem nvarchar(2048) = outbox.CheckResource(@Resource);
    IF @problem IS NULL SET @problem = outbox.CheckOwner(@OwnerId, @Token);
    IF @problem IS NOT NULL THROW 51000, @problem, 1;

    DECLARE @leaseResource nvarchar(400) = @Resource;

    UPDATE dbo.outbox_leases
    SET owner_id = NULL,
        expires_at = NULL
    WHERE resource = @leaseResource
      AND owner_id = @OwnerId
      AND fence = @Token;

    SELECT CAST(IIF(@@ROWCOUNT = 1, 1, 0) AS bit) AS Released;
END;
GO

-- Enqueue: records one op fenced by (resource, owner id, token) in the caller's transaction
-- (see the header), and returns its id, its sequence and whether it already existed with the
-- same request (Duplicate, G7). The insert is op_insert_if_lease_held.sql: it reads the lease
-- row WITH (HOLDLOCK, ROWLOCK), a shared lock held to the end of the transaction that a
-- takeover's UPDATE waits for, so a lost lease inserts nothing and no takeover commits between
-- the check and the caller's commit (G4); and it probes the key WITH (UPDLOCK, HOLDLOCK), so two
-- inserts of one key serialise. Only when nothing was inserted are the lease and the key read,
-- to say why: a lost lease never comes back to the same owner and token, so that read cannot
-- contradict the insert's check.
CREATE PROCEDURE outbox.Enqueue
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

    -- A time-ordered op id (UUID version 7), as the Rust producer makes them: the Unix time in
    -- milliseconds as 6 bytes big-endian, then random bits with the version (7) and the variant
    -- (10), in RFC 4122 byte order; then read from its text form, since a uniqueidentifier
    -- stores its first three groups little-endian.
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

    INSERT INTO dbo.outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                                request_hash, order_key, partition, method, path, headers,
                                content_type, body, expire_with_generation, next_attempt_at,
                                trace_context)
    OUTPUT inserted.id INTO @inserted (Seq)
    SELECT @opId, @leaseResource, @Token, @OwnerId, @destinationName, @key, @hash, @effectiveOrderKey, @partition,
           @methodName, @Path, @headersJson, @ContentType, @bodyBytes, COALESCE(@ExpireWithGeneration, 0),
           DATEADD(MILLISECOND, CAST(@delayMs % 1000 AS int),
                   DATEADD(SECOND, CAST(@delayMs / 1000 AS int),
                           CAST(SYSUTCDATETIME() AS datetimeoffset(7)))),
           @Traceparent
    FROM dbo.outbox_leases WITH (HOLDLOCK, ROWLOCK)
    WHERE resource = @leaseResource
      AND owner_id = @OwnerId
      AND fence = @Token
      AND expires_at > CAST(SYSUTCDATETIME() AS datetimeoffset(7))
      AND NOT EXISTS (
          SELECT 1
          FROM dbo.outbox_ops WITH (UPDLOCK, HOLDLOCK)
          WHERE destination = @destinationName
            AND idempotency_key = @key
      );

    DECLARE @seq bigint = (SELECT Seq FROM @inserted);
    IF @seq IS NOT NULL
    BEGIN
        IF @SupersedePending = 1
            -- Older tokens' pending ops of this resource and destination are never sent (G5);
            -- as op_supersede_older_pending.sql.
            UPDATE dbo.outbox_ops
            SET state = 'superseded',
                finished_at = CAST(SYSUTCDATETIME() AS datetimeoffset(7)),
                last_error = CONCAT(N'superseded by token ', @Token)
            WHERE resource = @leaseResource
              AND destination = @destinationName
              AND fence < @Token
              AND state = 'pending';
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
    FROM dbo.outbox_ops WITH (UPDLOCK, HOLDLOCK)
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
