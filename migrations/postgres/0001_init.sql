-- 0001_init: the whole data model of DESIGN.md on PostgreSQL.
-- Later migrations add to these tables; they never rebuild them.
-- Times are timestamptz written from clock_timestamp(): the database clock decides (G2).

-- One row per resource ever leased. The row is never deleted, so `fence` survives
-- release, expiry and restarts and every acquisition gets a larger token (G1).
CREATE TABLE outbox_leases (
    resource    text        PRIMARY KEY,
    owner_id    uuid        NULL,
    expires_at  timestamptz NULL,
    fence       bigint      NOT NULL DEFAULT 0,
    CONSTRAINT outbox_leases_resource_length CHECK (char_length(resource) BETWEEN 1 AND 200),
    CONSTRAINT outbox_leases_owner_has_expiry CHECK ((owner_id IS NULL) = (expires_at IS NULL)),
    CONSTRAINT outbox_leases_fence_not_negative CHECK (fence >= 0)
) WITH (fillfactor = 70); -- leases are rewritten in place all the time: room for HOT updates

-- One row per accepted op. `id` is the enqueue sequence (G8 order within a token).
CREATE TABLE outbox_ops (
    id                      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    op_id                   uuid        NOT NULL UNIQUE,
    resource                text        NOT NULL,
    fence                   bigint      NOT NULL,
    owner_id                uuid        NOT NULL,
    destination             text        NOT NULL,
    idempotency_key         text        NOT NULL,
    -- SHA-256 of the canonical request: the same key with another request is a conflict (G7).
    request_hash            bytea       NOT NULL,
    -- NULL: the op is unordered and may be delivered beside any other.
    order_key               text        NULL,
    -- Slot 0..1023, a stable hash of the order key (of the op id when unordered); partition p
    -- of P dispatcher partitions owns the slots with slot % P = p. Same key, same partition (G8).
    partition               integer     NOT NULL DEFAULT 0,
    method                  text        NOT NULL,
    path                    text        NOT NULL,
    -- A JSON array of [name, value] pairs, in the producer's order. Never credentials:
    -- those live in the dispatcher's destination config.
    headers                 jsonb       NOT NULL DEFAULT '[]',
    content_type            text        NULL,
    body                    bytea       NOT NULL DEFAULT '\x',
    expire_with_generation  boolean     NOT NULL DEFAULT false,
    state                   text        NOT NULL DEFAULT 'pending',
    attempts                integer     NOT NULL DEFAULT 0,
    next_attempt_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    claimed_by_fence        bigint      NULL,
    claimed_at              timestamptz NULL,
    last_error              text        NULL,
    trace_context           text        NULL,
    created_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    delivered_at            timestamptz NULL,
    -- When the op reached a terminal state (delivered, dead, cancelled, superseded): retention.
    finished_at             timestamptz NULL,
    CONSTRAINT outbox_ops_destination_key UNIQUE (destination, idempotency_key),
    CONSTRAINT outbox_ops_state CHECK (state IN ('pending', 'in_flight', 'delivered', 'dead', 'cancelled', 'superseded')),
    CONSTRAINT outbox_ops_method CHECK (method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')),
    CONSTRAINT outbox_ops_destination_format CHECK (destination ~ '^[a-z0-9_-]{1,64}$'),
    CONSTRAINT outbox_ops_key_length CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT outbox_ops_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT outbox_ops_partition_slot CHECK (partition BETWEEN 0 AND 1023),
    CONSTRAINT outbox_ops_claim_matches_state CHECK ((state = 'in_flight') = (claimed_by_fence IS NOT NULL))
);

-- Claim: due pending ops, oldest first; a dispatcher partition keeps the slots it owns while
-- scanning. Partial, so the cost of a claim depends on the backlog, never on the history.
CREATE INDEX outbox_ops_due_idx ON outbox_ops (next_attempt_at, id)
    WHERE state = 'pending';

-- G8: the head of each order key (lowest token, then sequence) and whether the key has an
-- op in flight, without touching finished ops.
CREATE INDEX outbox_ops_order_key_idx ON outbox_ops (order_key, fence, id)
    WHERE state IN ('pending', 'in_flight') AND order_key IS NOT NULL;

-- Takeover: ops left in flight by an older dispatcher token are found and re-queued (G6, G9).
CREATE INDEX outbox_ops_in_flight_idx ON outbox_ops (partition, claimed_by_fence)
    WHERE state = 'in_flight';

-- supersede_pending: the older-token pending ops of one resource and destination (G5).
CREATE INDEX outbox_ops_supersede_idx ON outbox_ops (resource, destination, fence)
    WHERE state = 'pending';

-- expire_with_generation: pending ops that must be dropped once their token is not the newest
-- of their resource; few, so checking them each claim cycle is cheap.
CREATE INDEX outbox_ops_generation_idx ON outbox_ops (resource, fence)
    WHERE state = 'pending' AND expire_with_generation;

-- Retention and dead-letter views: terminal ops by the time they finished.
CREATE INDEX outbox_ops_finished_idx ON outbox_ops (finished_at)
    WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded');

-- Claim and complete rewrite rows constantly; dead tuples, not backlog size, slow the claim
-- (measured on PostgreSQL 15: 12.6k -> 6.3k claims/s in 60 s with default autovacuum, flat with
-- these). Vacuum this table early and without cost-based throttling.
ALTER TABLE outbox_ops SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- One row per delivery attempt of an op.
CREATE TABLE outbox_attempts (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    op_id             uuid        NOT NULL REFERENCES outbox_ops (op_id) ON DELETE CASCADE,
    attempt           integer     NOT NULL,
    dispatcher_fence  bigint      NOT NULL,
    started_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at       timestamptz NULL,
    -- delivered: 2xx; failed: a definite failure; unknown: timed out after the request was sent.
    outcome           text        NULL,
    http_status       integer     NULL,
    error             text        NULL,
    response_excerpt  text        NULL,
    CONSTRAINT outbox_attempts_op_attempt UNIQUE (op_id, attempt),
    CONSTRAINT outbox_attempts_outcome CHECK (outcome IN ('delivered', 'failed', 'unknown')),
    CONSTRAINT outbox_attempts_error_length CHECK (char_length(error) <= 2048),
    CONSTRAINT outbox_attempts_excerpt_length CHECK (char_length(response_excerpt) <= 1024)
);

-- Stale or expired enqueue attempts (G4), kept for operators with bounded retention.
CREATE TABLE outbox_rejections (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource         text        NOT NULL,
    owner_id         uuid        NOT NULL,
    fence            bigint      NOT NULL,
    -- The resource's token when the enqueue was refused; NULL when it was never leased.
    current_fence    bigint      NULL,
    destination      text        NULL,
    idempotency_key  text        NULL,
    stage            text        NOT NULL,
    reason           text        NOT NULL,
    rejected_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT outbox_rejections_reason CHECK (reason IN ('stale', 'expired', 'no_lease'))
);

-- Recent rejections, overall and per resource; retention deletes by age.
CREATE INDEX outbox_rejections_time_idx ON outbox_rejections (rejected_at);
CREATE INDEX outbox_rejections_resource_idx ON outbox_rejections (resource, rejected_at);

-- Every replay, cancel and purge an operator ran: who, when, why, on what.
CREATE TABLE outbox_admin_log (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor     text        NOT NULL,
    action    text        NOT NULL,
    reason    text        NOT NULL,
    -- The ops or filter the action applied to, and its counts, as JSON.
    details   jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT outbox_admin_log_action CHECK (action IN ('replay', 'cancel', 'purge'))
);

-- Whether any dispatcher partition is idle and waiting for a notification. An enqueue sends
-- pg_notify only then: NOTIFY serialises the commits of the transactions that use it, so a busy
-- dispatcher (which claims without waiting) turns notifications off.
CREATE TABLE outbox_wakeups (
    partition   integer     PRIMARY KEY,
    listening   boolean     NOT NULL DEFAULT false,
    changed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
