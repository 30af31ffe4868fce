-- 0013_queue_layout: delivering an op no longer rewrites the row that keeps it (issue 36,
-- docs/design/queue-layout.md; see migrations/postgres/0013_queue_layout.sql). An op is three
-- kinds of row:
--   outbox_requests  what the producer asked for: written once at enqueue, never updated; the
--                    G7 key, `show` and `list --resource` read it;
--   outbox_queue     one narrow row per unfinished op: what the claim reads and changes. The
--                    claim changes only columns no index covers, so SQLite writes the row and
--                    no index entry; the row is deleted when the op finishes;
--   outbox_finished  one row per finished op (delivered, dead, cancelled, superseded),
--                    inserted by the transaction that deletes its queue row.
-- An op's state is stored once: pending or in flight is its queue row (claimed_by_fence), a
-- terminal state its finished row. The view outbox_ops has the old table's columns, for
-- `show`, `list` and anything outside that reads ops (it cannot be written to).
--
-- SQLite can neither drop a column that a CHECK or an index names nor drop a CHECK, so the
-- request table is built anew and the rows are copied (bodies included), as 0006 did for the
-- admin log. outbox_attempts is built anew too: its foreign key named outbox_ops, and
-- dropping a parent table with foreign keys on deletes its children first (ON DELETE
-- CASCADE). The migration runs in one BEGIN IMMEDIATE transaction: writers wait for the copy.

-- 1. The requests: outbox_ops's columns but those that move, with the same constraints
-- (G10, G11: the table refuses what the builder refuses) and ids.
CREATE TABLE outbox_requests (
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
    -- Slot 0..1023 (0001_init.sql); partition p of P owns the slots with slot % P = p (G8, G12).
    partition               INTEGER NOT NULL DEFAULT 0,
    method                  TEXT    NOT NULL,
    path                    TEXT    NOT NULL,
    -- A JSON array of [name, value] pairs, in the producer's order. Never credentials.
    headers                 TEXT    NOT NULL DEFAULT '[]',
    content_type            TEXT    NULL,
    body                    BLOB    NOT NULL DEFAULT x'',
    expire_with_generation  INTEGER NOT NULL DEFAULT 0,
    trace_context           TEXT    NULL,
    created_at              TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    trace_state             TEXT    NULL,
    CONSTRAINT outbox_ops_destination_key UNIQUE (destination, idempotency_key),
    CONSTRAINT outbox_ops_method CHECK (method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')),
    CONSTRAINT outbox_ops_destination_format CHECK (length(destination) BETWEEN 1 AND 64 AND destination NOT GLOB '*[^a-z0-9_-]*'),
    CONSTRAINT outbox_ops_key_length CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT outbox_ops_partition_slot CHECK (partition BETWEEN 0 AND 1023),
    CONSTRAINT outbox_ops_expire_flag CHECK (expire_with_generation IN (0, 1))
) STRICT;

INSERT INTO outbox_requests (id, op_id, resource, fence, owner_id, destination, idempotency_key,
                             request_hash, order_key, partition, method, path, headers,
                             content_type, body, expire_with_generation, trace_context,
                             created_at, trace_state)
SELECT id, op_id, resource, fence, owner_id, destination, idempotency_key, request_hash,
       order_key, partition, method, path, headers, content_type, body, expire_with_generation,
       trace_context, created_at, trace_state
FROM outbox_ops
ORDER BY id;

-- AUTOINCREMENT's high-water mark moves with the rows, so an id purged before the migration
-- is never handed out again (0001_init.sql).
DELETE FROM sqlite_sequence WHERE name = 'outbox_requests';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'outbox_requests', seq FROM sqlite_sequence WHERE name = 'outbox_ops';

-- 2. The queue. No foreign key to the request (as on PostgreSQL): the store writes both in
-- one transaction. destination, fence, order_key and expire_with_generation are the
-- request's, copied so the claim reads no other table; partition is its slot. last_error and
-- last_attempt_trace are the previous attempt's, for the retry that reads them back.
CREATE TABLE outbox_queue (
    id                      INTEGER NOT NULL PRIMARY KEY,
    next_attempt_at         TEXT    NOT NULL,
    partition               INTEGER NOT NULL,
    destination             TEXT    NOT NULL,
    fence                   INTEGER NOT NULL,
    order_key               TEXT    NULL,
    expire_with_generation  INTEGER NOT NULL,
    attempts                INTEGER NOT NULL DEFAULT 0,
    claimed_by_fence        INTEGER NULL,
    claimed_by_lease        TEXT    NULL,
    claimed_at              TEXT    NULL,
    retry_base_attempts     INTEGER NOT NULL DEFAULT 0,
    retry_since             TEXT    NULL,
    last_error              TEXT    NULL,
    last_attempt_trace      TEXT    NULL,
    CONSTRAINT outbox_queue_claim CHECK ((claimed_by_fence IS NULL) = (claimed_at IS NULL))
) STRICT;

-- 3. Finished ops. attempts, next_attempt_at, retry_* and last_attempt_trace are the op's when
-- it finished: `show` and `list` print them, and a replay starts its fresh budget from attempts.
CREATE TABLE outbox_finished (
    id                   INTEGER NOT NULL PRIMARY KEY,
    state                TEXT    NOT NULL,
    attempts             INTEGER NOT NULL,
    next_attempt_at      TEXT    NOT NULL,
    finished_at          TEXT    NOT NULL,
    last_error           TEXT    NULL,
    retry_base_attempts  INTEGER NOT NULL DEFAULT 0,
    retry_since          TEXT    NULL,
    last_attempt_trace   TEXT    NULL,
    CONSTRAINT outbox_finished_state CHECK (state IN ('delivered', 'dead', 'cancelled', 'superseded'))
) STRICT;

-- 4. Carry the ops forward. An op in flight keeps its claim (lease and token), so the next
-- leader of its partition finds it and records its attempt as unknown (G9); one claimed before
-- 0003_hardening.sql named no lease and is re-queued by any new leader.
INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                          expire_with_generation, attempts, claimed_by_fence, claimed_by_lease,
                          claimed_at, retry_base_attempts, retry_since, last_error,
                          last_attempt_trace)
SELECT id, next_attempt_at, partition, destination, fence, order_key, expire_with_generation,
       attempts,
       CASE WHEN state = 'in_flight' THEN claimed_by_fence END,
       CASE WHEN state = 'in_flight' THEN coalesce(claimed_by_lease, '') END,
       CASE WHEN state = 'in_flight' THEN coalesce(claimed_at, created_at) END,
       retry_base_attempts, retry_since, last_error, last_attempt_trace
FROM outbox_ops
WHERE state IN ('pending', 'in_flight')
ORDER BY id;

INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                             retry_base_attempts, retry_since, last_attempt_trace)
SELECT id, state, attempts, next_attempt_at, coalesce(finished_at, delivered_at, created_at),
       last_error, retry_base_attempts, retry_since, last_attempt_trace
FROM outbox_ops
WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded')
ORDER BY id;

-- 5. The attempts, unchanged but for their foreign key, which names the requests: the purges
-- delete a finished op's request and its attempts go with it (ON DELETE CASCADE; 0009).
CREATE TABLE outbox_attempts_new (
    id                INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    op_id             TEXT    NOT NULL REFERENCES outbox_requests (op_id) ON DELETE CASCADE,
    attempt           INTEGER NOT NULL,
    dispatcher_fence  INTEGER NOT NULL,
    started_at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    finished_at       TEXT    NULL,
    -- delivered: 2xx; failed: a definite failure; unknown: timed out after the request was sent.
    outcome           TEXT    NULL,
    http_status       INTEGER NULL,
    error             TEXT    NULL,
    response_excerpt  TEXT    NULL,
    trace_context     TEXT    NULL,
    CONSTRAINT outbox_attempts_op_attempt UNIQUE (op_id, attempt),
    CONSTRAINT outbox_attempts_outcome CHECK (outcome IN ('delivered', 'failed', 'unknown')),
    CONSTRAINT outbox_attempts_error_length CHECK (length(error) <= 2048),
    CONSTRAINT outbox_attempts_excerpt_length CHECK (length(response_excerpt) <= 1024)
) STRICT;
INSERT INTO outbox_attempts_new (id, op_id, attempt, dispatcher_fence, started_at, finished_at,
                                 outcome, http_status, error, response_excerpt, trace_context)
SELECT id, op_id, attempt, dispatcher_fence, started_at, finished_at, outcome, http_status,
       error, response_excerpt, trace_context
FROM outbox_attempts
ORDER BY id;
-- `tail` follows attempts by id: a purged id is never handed out again either.
DELETE FROM sqlite_sequence WHERE name = 'outbox_attempts_new';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'outbox_attempts_new', seq FROM sqlite_sequence WHERE name = 'outbox_attempts';

-- 6. The old tables go, the child first (its rows are copied), so that dropping outbox_ops
-- cascades to nothing.
DROP TABLE outbox_attempts;
DROP TABLE outbox_ops;
ALTER TABLE outbox_attempts_new RENAME TO outbox_attempts;

-- 7. The indexes of the new layout.
-- `list --resource R`, `show` and G5's supersede: one resource's ops, newest first (0002).
CREATE INDEX outbox_ops_resource_idx ON outbox_requests (resource, id);
-- The claim: due ops in order. In-flight rows stay in it (the claim changes no indexed column,
-- so it writes no index entry) and are skipped by a check of the row: at most the ops in
-- flight.
CREATE INDEX outbox_queue_due_idx ON outbox_queue (next_attempt_at, id);
-- G8: each order key's head (lowest token, then sequence) and whether the key has an op in
-- flight. Partial on a column no claim changes; unordered ops have no entry.
CREATE INDEX outbox_queue_order_key_idx ON outbox_queue (order_key, fence, id)
    WHERE order_key IS NOT NULL;
-- G5: the few ops that expire with their token's generation, checked every claim cycle.
CREATE INDEX outbox_queue_generation_idx ON outbox_queue (id)
    WHERE expire_with_generation = 1;
-- `list --state dead|cancelled|superseded`, `replay --state dead`, the console's attention
-- view: the few ops that need an operator, newest first, without the delivered history.
-- Statements repeat the predicate word for word: SQLite uses a partial index only then.
CREATE INDEX outbox_finished_attention_idx ON outbox_finished (state, id)
    WHERE state IN ('dead', 'cancelled', 'superseded');
-- Retention: finished ops by the time they finished (SQLite has no block range index).
CREATE INDEX outbox_finished_at_idx ON outbox_finished (finished_at);

-- 8. The rules of 0003_hardening.sql, on the requests, under their old names.
CREATE TRIGGER outbox_ops_row_rules_insert BEFORE INSERT ON outbox_requests
WHEN substr(NEW.path, 1, 1) IS NOT '/'
  OR substr(NEW.path, 1, 2) = '//'
  OR NEW.path GLOB '*[^!-~]*'
  OR length(CAST(NEW.path AS BLOB)) > 2048
  OR length(CAST(NEW.body AS BLOB)) > 16777216
  OR CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) <> 'array' ELSE 1 END
BEGIN
    SELECT RAISE(ABORT, 'outbox_ops row rules: the path must be one leading / and visible ASCII (at most 2048 bytes), the body at most 16 MiB, the headers a JSON array');
END;

CREATE TRIGGER outbox_ops_row_rules_update BEFORE UPDATE OF path, body, headers ON outbox_requests
WHEN substr(NEW.path, 1, 1) IS NOT '/'
  OR substr(NEW.path, 1, 2) = '//'
  OR NEW.path GLOB '*[^!-~]*'
  OR length(CAST(NEW.path AS BLOB)) > 2048
  OR length(CAST(NEW.body AS BLOB)) > 16777216
  OR CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) <> 'array' ELSE 1 END
BEGIN
    SELECT RAISE(ABORT, 'outbox_ops row rules: the path must be one leading / and visible ASCII (at most 2048 bytes), the body at most 16 MiB, the headers a JSON array');
END;

-- 9. The old table's shape, read-only, for readers of ops: each request with its queue row or
-- its finished row (never both: the transaction that deletes one inserts the other), joined by
-- primary key, so a filter on a request column and ORDER BY id read the requests' indexes.
CREATE VIEW outbox_ops AS
SELECT r.id, r.op_id, r.resource, r.fence, r.owner_id, r.destination, r.idempotency_key,
       r.request_hash, r.order_key, r.partition, r.method, r.path, r.headers, r.content_type,
       r.body, r.expire_with_generation,
       CASE WHEN q.id IS NULL THEN f.state
            WHEN q.claimed_by_fence IS NULL THEN 'pending'
            ELSE 'in_flight' END AS state,
       CASE WHEN q.id IS NULL THEN f.attempts ELSE q.attempts END AS attempts,
       CASE WHEN q.id IS NULL THEN f.next_attempt_at ELSE q.next_attempt_at END AS next_attempt_at,
       q.claimed_by_fence, q.claimed_at,
       CASE WHEN q.id IS NULL THEN f.last_error ELSE q.last_error END AS last_error,
       r.trace_context, r.created_at,
       CASE WHEN f.state = 'delivered' THEN f.finished_at END AS delivered_at,
       f.finished_at,
       CASE WHEN q.id IS NULL THEN f.retry_base_attempts ELSE q.retry_base_attempts END
           AS retry_base_attempts,
       CASE WHEN q.id IS NULL THEN f.retry_since ELSE q.retry_since END AS retry_since,
       q.claimed_by_lease, r.trace_state,
       CASE WHEN q.id IS NULL THEN f.last_attempt_trace ELSE q.last_attempt_trace END
           AS last_attempt_trace
FROM outbox_requests r
LEFT JOIN outbox_queue q ON q.id = r.id
LEFT JOIN outbox_finished f ON f.id = r.id;
