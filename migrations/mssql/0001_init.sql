-- 0001_init: the whole data model of DESIGN.md on SQL Server.
-- Later migrations add to these tables; they never rebuild them.
-- Times are datetimeoffset(7) written from SYSUTCDATETIME(): the database clock decides (G2).
-- Not executed in this repository's CI (no SQL Server runs on its machines); the integration
-- suite applies it when OUTBOX_MSSQL_URL is set.
-- Names and keys compare exactly, as PostgreSQL compares text: resource, destination,
-- idempotency_key and order_key are COLLATE Latin1_General_100_BIN2. Under a database's
-- default case-insensitive collation, resources 'A' and 'a' would be one lease (one token
-- sequence for two resources, G1/G2), keys 'K' and 'k' one op (the second enqueue a duplicate
-- or a conflict, G7), and order keys that differ in case one order (G8). Statements that
-- compare these columns with values from OPENJSON collate those values the same way.
-- nvarchar(n) counts UTF-16 units, so names and keys have room for their limits in characters
-- outside the BMP (resource 200 -> 400, order_key 255 -> 510, within the index key limits);
-- free text the producer or the dispatcher bounds in characters (content type, errors,
-- excerpts) is nvarchar(max).

-- One row per resource ever leased. The row is never deleted, so `fence` survives
-- release, expiry and restarts and every acquisition gets a larger token (G1).
CREATE TABLE dbo.outbox_leases (
    resource    nvarchar(400)     COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT PK_outbox_leases PRIMARY KEY,
    owner_id    uniqueidentifier  NULL,
    expires_at  datetimeoffset(7) NULL,
    fence       bigint            NOT NULL CONSTRAINT DF_outbox_leases_fence DEFAULT (0),
    CONSTRAINT CK_outbox_leases_resource_length CHECK (LEN(resource) >= 1),
    CONSTRAINT CK_outbox_leases_owner_has_expiry CHECK ((owner_id IS NULL AND expires_at IS NULL) OR (owner_id IS NOT NULL AND expires_at IS NOT NULL)),
    CONSTRAINT CK_outbox_leases_fence_not_negative CHECK (fence >= 0)
);

-- One row per accepted op. `id` is the enqueue sequence (G8 order within a token).
CREATE TABLE dbo.outbox_ops (
    id                      bigint            IDENTITY(1, 1) NOT NULL CONSTRAINT PK_outbox_ops PRIMARY KEY,
    op_id                   uniqueidentifier  NOT NULL CONSTRAINT UQ_outbox_ops_op_id UNIQUE,
    resource                nvarchar(400)     COLLATE Latin1_General_100_BIN2 NOT NULL,
    fence                   bigint            NOT NULL,
    owner_id                uniqueidentifier  NOT NULL,
    destination             varchar(64)       COLLATE Latin1_General_100_BIN2 NOT NULL,
    idempotency_key         varchar(255)      COLLATE Latin1_General_100_BIN2 NOT NULL,
    -- SHA-256 of the canonical request: the same key with another request is a conflict (G7).
    request_hash            varbinary(32)     NOT NULL,
    -- NULL: the op is unordered and may be delivered beside any other.
    order_key               nvarchar(510)     COLLATE Latin1_General_100_BIN2 NULL,
    -- Slot 0..1023, a stable hash of the order key (of the op id when unordered); partition p
    -- of P dispatcher partitions owns the slots with slot % P = p. Same key, same partition (G8).
    partition               int               NOT NULL CONSTRAINT DF_outbox_ops_partition DEFAULT (0),
    method                  varchar(8)        NOT NULL,
    path                    nvarchar(2048)    NOT NULL,
    -- A JSON array of [name, value] pairs, in the producer's order. Never credentials.
    headers                 nvarchar(max)     NOT NULL CONSTRAINT DF_outbox_ops_headers DEFAULT (N'[]'),
    content_type            nvarchar(max)     NULL,
    body                    varbinary(max)    NOT NULL CONSTRAINT DF_outbox_ops_body DEFAULT (0x),
    expire_with_generation  bit               NOT NULL CONSTRAINT DF_outbox_ops_expire DEFAULT (0),
    state                   varchar(16)       NOT NULL CONSTRAINT DF_outbox_ops_state DEFAULT ('pending'),
    attempts                int               NOT NULL CONSTRAINT DF_outbox_ops_attempts DEFAULT (0),
    next_attempt_at         datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_ops_next DEFAULT (SYSUTCDATETIME()),
    claimed_by_fence        bigint            NULL,
    claimed_at              datetimeoffset(7) NULL,
    last_error              nvarchar(max)     NULL,
    trace_context           varchar(512)      NULL,
    created_at              datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_ops_created DEFAULT (SYSUTCDATETIME()),
    delivered_at            datetimeoffset(7) NULL,
    -- When the op reached a terminal state (delivered, dead, cancelled, superseded): retention.
    finished_at             datetimeoffset(7) NULL,
    CONSTRAINT UQ_outbox_ops_destination_key UNIQUE (destination, idempotency_key),
    CONSTRAINT CK_outbox_ops_state CHECK (state IN ('pending', 'in_flight', 'delivered', 'dead', 'cancelled', 'superseded')),
    CONSTRAINT CK_outbox_ops_method CHECK (method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')),
    CONSTRAINT CK_outbox_ops_destination_format CHECK (LEN(destination) >= 1 AND destination NOT LIKE '%[^a-z0-9_-]%' COLLATE Latin1_General_BIN2),
    CONSTRAINT CK_outbox_ops_key_length CHECK (LEN(idempotency_key) >= 1),
    CONSTRAINT CK_outbox_ops_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT CK_outbox_ops_partition_slot CHECK (partition BETWEEN 0 AND 1023),
    CONSTRAINT CK_outbox_ops_claim_matches_state CHECK ((state = 'in_flight' AND claimed_by_fence IS NOT NULL) OR (state <> 'in_flight' AND claimed_by_fence IS NULL))
);

-- Claim: due pending ops, oldest first; a dispatcher partition keeps the slots it owns while
-- scanning. Filtered, so the cost of a claim depends on the backlog, never on the history.
CREATE INDEX IX_outbox_ops_due ON dbo.outbox_ops (next_attempt_at, id)
    WHERE state = 'pending';

-- G8: the head of each order key (lowest token, then sequence) and whether it has an op in flight.
CREATE INDEX IX_outbox_ops_order_key ON dbo.outbox_ops (order_key, fence, id)
    WHERE state IN ('pending', 'in_flight') AND order_key IS NOT NULL;

-- Takeover: ops left in flight by an older dispatcher token are found and re-queued (G6, G9).
CREATE INDEX IX_outbox_ops_in_flight ON dbo.outbox_ops (partition, claimed_by_fence)
    WHERE state = 'in_flight';

-- supersede_pending: the older-token pending ops of one resource and destination (G5).
CREATE INDEX IX_outbox_ops_supersede ON dbo.outbox_ops (resource, destination, fence)
    WHERE state = 'pending';

-- expire_with_generation: pending ops that must be dropped once their token is not the newest
-- of their resource; few, so checking them each claim cycle is cheap.
CREATE INDEX IX_outbox_ops_generation ON dbo.outbox_ops (resource, fence)
    WHERE state = 'pending' AND expire_with_generation = 1;

-- Retention and dead-letter views: terminal ops by the time they finished.
CREATE INDEX IX_outbox_ops_finished ON dbo.outbox_ops (finished_at)
    WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded');

-- One row per delivery attempt of an op.
CREATE TABLE dbo.outbox_attempts (
    id                bigint            IDENTITY(1, 1) NOT NULL CONSTRAINT PK_outbox_attempts PRIMARY KEY,
    op_id             uniqueidentifier  NOT NULL CONSTRAINT FK_outbox_attempts_op REFERENCES dbo.outbox_ops (op_id) ON DELETE CASCADE,
    attempt           int               NOT NULL,
    dispatcher_fence  bigint            NOT NULL,
    started_at        datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_attempts_started DEFAULT (SYSUTCDATETIME()),
    finished_at       datetimeoffset(7) NULL,
    -- delivered: 2xx; failed: a definite failure; unknown: timed out after the request was sent.
    outcome           varchar(16)       NULL,
    http_status       int               NULL,
    error             nvarchar(max)     NULL,
    response_excerpt  nvarchar(max)     NULL,
    CONSTRAINT UQ_outbox_attempts_op_attempt UNIQUE (op_id, attempt),
    CONSTRAINT CK_outbox_attempts_outcome CHECK (outcome IN ('delivered', 'failed', 'unknown'))
);

-- Stale or expired enqueue attempts (G4), kept for operators with bounded retention.
CREATE TABLE dbo.outbox_rejections (
    id               bigint            IDENTITY(1, 1) NOT NULL CONSTRAINT PK_outbox_rejections PRIMARY KEY,
    resource         nvarchar(400)     COLLATE Latin1_General_100_BIN2 NOT NULL,
    owner_id         uniqueidentifier  NOT NULL,
    fence            bigint            NOT NULL,
    -- The resource's token when the enqueue was refused; NULL when it was never leased.
    current_fence    bigint            NULL,
    destination      varchar(64)       COLLATE Latin1_General_100_BIN2 NULL,
    idempotency_key  varchar(255)      COLLATE Latin1_General_100_BIN2 NULL,
    stage            varchar(32)       NOT NULL,
    reason           varchar(16)       NOT NULL,
    rejected_at      datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_rejections_at DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT CK_outbox_rejections_reason CHECK (reason IN ('stale', 'expired', 'no_lease'))
);

-- Recent rejections, overall and per resource; retention deletes by age.
CREATE INDEX IX_outbox_rejections_time ON dbo.outbox_rejections (rejected_at);
CREATE INDEX IX_outbox_rejections_resource ON dbo.outbox_rejections (resource, rejected_at);

-- Every replay, cancel and purge an operator ran: who, when, why, on what.
CREATE TABLE dbo.outbox_admin_log (
    id        bigint            IDENTITY(1, 1) NOT NULL CONSTRAINT PK_outbox_admin_log PRIMARY KEY,
    at        datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_admin_log_at DEFAULT (SYSUTCDATETIME()),
    -- Sized in UTF-16 units for what Change::validate allows (200 and 2000 characters).
    actor     nvarchar(400)     NOT NULL,
    action    varchar(16)       NOT NULL,
    reason    nvarchar(4000)    NOT NULL,
    -- The ops or filter the action applied to, and its counts, as JSON.
    details   nvarchar(max)     NOT NULL CONSTRAINT DF_outbox_admin_log_details DEFAULT (N'{}'),
    CONSTRAINT CK_outbox_admin_log_action CHECK (action IN ('replay', 'cancel', 'purge'))
);

-- Whether any dispatcher partition is idle and waiting to be woken (kept for operators).
CREATE TABLE dbo.outbox_wakeups (
    partition   int               NOT NULL CONSTRAINT PK_outbox_wakeups PRIMARY KEY,
    listening   bit               NOT NULL CONSTRAINT DF_outbox_wakeups_listening DEFAULT (0),
    changed_at  datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_wakeups_changed DEFAULT (SYSUTCDATETIME())
);
