-- 0001_init: the whole data model of DESIGN.md on SQLite.
-- Later migrations add to these tables; they never rebuild them.
-- Times are TEXT in one fixed UTC format, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), written only by
-- the database, so they compare correctly as text (G2). UUIDs are hyphenated lowercase TEXT.

-- One row per resource ever leased. The row is never deleted, so `fence` survives
-- release, expiry and restarts and every acquisition gets a larger token (G1).
CREATE TABLE outbox_leases (
    resource    TEXT    NOT NULL PRIMARY KEY,
    owner_id    TEXT    NULL,
    expires_at  TEXT    NULL,
    fence       INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT outbox_leases_resource_length CHECK (length(resource) BETWEEN 1 AND 200),
    CONSTRAINT outbox_leases_owner_has_expiry CHECK ((owner_id IS NULL) = (expires_at IS NULL)),
    CONSTRAINT outbox_leases_fence_not_negative CHECK (fence >= 0)
) STRICT;

-- One row per accepted op. `id` is the enqueue sequence (G8 order within a token);
-- AUTOINCREMENT so a purged id is never handed out again.
CREATE TABLE outbox_ops (
    id                      INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    op_id                   TEXT    NOT NULL UNIQUE,
    resource                TEXT    NOT NULL,
    fence                   INTEGER NOT NULL,
    owner_id                TEXT    NOT NULL,
    destination             TEXT    NOT NULL,
    idempotency_key         TEXT    NOT NULL,
    -- SHA-256 of the canonical request: the same key with another request is a conflict (G7).
    request_hash            BLOB    NOT NULL,
    -- NULL: the op is unordered and may be delivered beside any other.
    order_key               TEXT    NULL,
    -- Slot 0..1023, a stable hash of the order key (of the op id when unordered); partition p
    -- of P dispatcher partitions owns the slots with slot % P = p. Same key, same partition (G8).
    partition               INTEGER NOT NULL DEFAULT 0,
    method                  TEXT    NOT NULL,
    path                    TEXT    NOT NULL,
    -- A JSON array of [name, value] pairs, in the producer's order. Never credentials:
    -- those live in the dispatcher's destination config.
    headers                 TEXT    NOT NULL DEFAULT '[]',
    content_type            TEXT    NULL,
    body                    BLOB    NOT NULL DEFAULT x'',
    expire_with_generation  INTEGER NOT NULL DEFAULT 0,
    state                   TEXT    NOT NULL DEFAULT 'pending',
    attempts                INTEGER NOT NULL DEFAULT 0,
    next_attempt_at         TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    claimed_by_fence        INTEGER NULL,
    claimed_at              TEXT    NULL,
    last_error              TEXT    NULL,
    trace_context           TEXT    NULL,
    created_at              TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    delivered_at            TEXT    NULL,
    -- When the op reached a terminal state (delivered, dead, cancelled, superseded): retention.
    finished_at             TEXT    NULL,
    CONSTRAINT outbox_ops_destination_key UNIQUE (destination, idempotency_key),
    CONSTRAINT outbox_ops_state CHECK (state IN ('pending', 'in_flight', 'delivered', 'dead', 'cancelled', 'superseded')),
    CONSTRAINT outbox_ops_method CHECK (method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')),
    CONSTRAINT outbox_ops_destination_format CHECK (length(destination) BETWEEN 1 AND 64 AND destination NOT GLOB '*[^a-z0-9_-]*'),
    CONSTRAINT outbox_ops_key_length CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT outbox_ops_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT outbox_ops_partition_slot CHECK (partition BETWEEN 0 AND 1023),
    CONSTRAINT outbox_ops_expire_flag CHECK (expire_with_generation IN (0, 1)),
    CONSTRAINT outbox_ops_claim_matches_state CHECK ((state = 'in_flight') = (claimed_by_fence IS NOT NULL))
) STRICT;

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
    WHERE state = 'pending' AND expire_with_generation = 1;

-- Retention and dead-letter views: terminal ops by the time they finished.
CREATE INDEX outbox_ops_finished_idx ON outbox_ops (finished_at)
    WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded');

-- One row per delivery attempt of an op.
CREATE TABLE outbox_attempts (
    id                INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    op_id             TEXT    NOT NULL REFERENCES outbox_ops (op_id) ON DELETE CASCADE,
    attempt           INTEGER NOT NULL,
    dispatcher_fence  INTEGER NOT NULL,
    started_at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    finished_at       TEXT    NULL,
    -- delivered: 2xx; failed: a definite failure; unknown: timed out after the request was sent.
    outcome           TEXT    NULL,
    http_status       INTEGER NULL,
    error             TEXT    NULL,
    response_excerpt  TEXT    NULL,
    CONSTRAINT outbox_attempts_op_attempt UNIQUE (op_id, attempt),
    CONSTRAINT outbox_attempts_outcome CHECK (outcome IN ('delivered', 'failed', 'unknown')),
    CONSTRAINT outbox_attempts_error_length CHECK (length(error) <= 2048),
    CONSTRAINT outbox_attempts_excerpt_length CHECK (length(response_excerpt) <= 1024)
) STRICT;

-- Stale or expired enqueue attempts (G4), kept for operators with bounded retention.
CREATE TABLE outbox_rejections (
    id               INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    resource         TEXT    NOT NULL,
    owner_id         TEXT    NOT NULL,
    fence            INTEGER NOT NULL,
    -- The resource's token when the enqueue was refused; NULL when it was never leased.
    current_fence    INTEGER NULL,
    destination      TEXT    NULL,
    idempotency_key  TEXT    NULL,
    stage            TEXT    NOT NULL,
    reason           TEXT    NOT NULL,
    rejected_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT outbox_rejections_reason CHECK (reason IN ('stale', 'expired', 'no_lease'))
) STRICT;

-- Recent rejections, overall and per resource; retention deletes by age.
CREATE INDEX outbox_rejections_time_idx ON outbox_rejections (rejected_at);
CREATE INDEX outbox_rejections_resource_idx ON outbox_rejections (resource, rejected_at);

-- Every replay, cancel and purge an operator ran: who, when, why, on what.
CREATE TABLE outbox_admin_log (
    id        INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    actor     TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    reason    TEXT    NOT NULL,
    -- The ops or filter the action applied to, and its counts, as JSON.
    details   TEXT    NOT NULL DEFAULT '{}',
    CONSTRAINT outbox_admin_log_action CHECK (action IN ('replay', 'cancel', 'purge'))
) STRICT;

-- Whether any dispatcher partition is idle and waiting for a notification (PostgreSQL sends
-- pg_notify only then; SQLite dispatchers poll, and keep the row only for operators to read).
CREATE TABLE outbox_wakeups (
    partition   INTEGER NOT NULL PRIMARY KEY,
    listening   INTEGER NOT NULL DEFAULT 0,
    changed_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
