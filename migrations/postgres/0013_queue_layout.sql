-- 0013_queue_layout: delivering an op no longer rewrites the row that keeps it (issue 36,
-- docs/design/queue-layout.md). Until now an op was one wide row that the claim and the
-- completion each rewrote (neither could be a HOT update: both changed `state`, which the
-- partial indexes read), so each wrote a whole new row version and an entry in every index.
-- Now the op is three kinds of row:
--   outbox_requests  what the producer asked for (the old outbox_ops, renamed): written once
--                    at enqueue, never updated; the G7 key, `show` and `list --resource` read it;
--   outbox_queue     one narrow row per unfinished op: what the claim reads and changes. The
--                    claim changes only columns no index covers, so with the room fillfactor 40
--                    leaves on the page it is a HOT update; the row is deleted when the op
--                    finishes;
--   outbox_finished  one row per finished op (delivered, dead, cancelled, superseded), appended
--                    by the statement that deletes its queue row.
-- outbox_attempts is unchanged: attempts were already appended. An op's state is stored once:
-- pending or in flight is its queue row (claimed_by_fence), a terminal state its finished row.
-- The view outbox_ops has the old table's columns, for `list`, `show` and anything outside
-- that reads ops (it cannot be written to).
--
-- The migration keeps every op: the unfinished ones' queue rows and the finished ones' rows
-- are copied from the old columns, which are then dropped (a catalog change: existing request
-- rows are not rewritten). It runs in the migration's one transaction, holding outbox_ops
-- (ACCESS EXCLUSIVE) while it copies the backlog and the finished ops' narrow part.

-- 1. The queue. No foreign key to the request: its check would cost a trigger and a lock per
-- enqueue (0009_lean_attempts.sql); the store's statements write both rows in one statement.
-- destination, fence, order_key and expire_with_generation are the request's, copied so the
-- claim reads no other table; partition is its slot (0..1023, G12). last_error and
-- last_attempt_trace are the previous attempt's, for the retry that reads them back.
CREATE TABLE outbox_queue (
    id                      bigint      PRIMARY KEY,
    next_attempt_at         timestamptz NOT NULL,
    partition               integer     NOT NULL,
    destination             text        NOT NULL,
    fence                   bigint      NOT NULL,
    order_key               text        NULL,
    expire_with_generation  boolean     NOT NULL,
    attempts                integer     NOT NULL DEFAULT 0,
    claimed_by_fence        bigint      NULL,
    claimed_by_lease        text        NULL,
    claimed_at              timestamptz NULL,
    retry_base_attempts     integer     NOT NULL DEFAULT 0,
    retry_since             timestamptz NULL,
    last_error              text        NULL,
    last_attempt_trace      text        NULL,
    CONSTRAINT outbox_queue_claim CHECK ((claimed_by_fence IS NULL) = (claimed_at IS NULL))
) WITH (
    -- Measured on the prototype's queue (BENCHMARKS.md, issue 36): claims are HOT 17% of the
    -- time at fillfactor 100, 41% at 70, 100% at 40. The table holds only unfinished ops.
    fillfactor = 40,
    -- Claims and completions rewrite and delete rows constantly (see 0001_init.sql).
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- 2. Finished ops. Never a foreign key either (the purge deletes both rows in one statement).
-- attempts, next_attempt_at, retry_* and last_attempt_trace are the op's when it finished:
-- `show` and `list` print them, and a replay starts its fresh budget from attempts.
CREATE TABLE outbox_finished (
    id                   bigint      PRIMARY KEY,
    state                text        NOT NULL,
    attempts             integer     NOT NULL,
    next_attempt_at      timestamptz NOT NULL,
    finished_at          timestamptz NOT NULL,
    last_error           text        NULL,
    retry_base_attempts  integer     NOT NULL DEFAULT 0,
    retry_since          timestamptz NULL,
    last_attempt_trace   text        NULL,
    CONSTRAINT outbox_finished_state CHECK (state IN ('delivered', 'dead', 'cancelled', 'superseded'))
);

-- 3. Carry the ops forward. An op in flight keeps its claim (lease and token), so the next
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
WHERE state IN ('pending', 'in_flight');

INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                             retry_base_attempts, retry_since, last_attempt_trace)
SELECT id, state, attempts, next_attempt_at, coalesce(finished_at, delivered_at, created_at),
       last_error, retry_base_attempts, retry_since, last_attempt_trace
FROM outbox_ops
WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded');

-- 4. The old table keeps only the request. Its partial indexes and the constraints on the
-- columns that moved go with them.
DROP INDEX outbox_ops_due_idx;
DROP INDEX outbox_ops_order_key_idx;
DROP INDEX outbox_ops_in_flight_idx;
DROP INDEX outbox_ops_supersede_idx;
DROP INDEX outbox_ops_generation_idx;
DROP INDEX outbox_ops_finished_idx;
DROP INDEX outbox_ops_attention_idx;
ALTER TABLE outbox_ops
    DROP CONSTRAINT outbox_ops_state,
    DROP CONSTRAINT outbox_ops_attempts_not_negative,
    DROP CONSTRAINT outbox_ops_claim_matches_state,
    DROP COLUMN state,
    DROP COLUMN attempts,
    DROP COLUMN next_attempt_at,
    DROP COLUMN claimed_by_fence,
    DROP COLUMN claimed_by_lease,
    DROP COLUMN claimed_at,
    DROP COLUMN last_error,
    DROP COLUMN delivered_at,
    DROP COLUMN finished_at,
    DROP COLUMN retry_base_attempts,
    DROP COLUMN retry_since,
    DROP COLUMN last_attempt_trace;
ALTER TABLE outbox_ops RENAME TO outbox_requests;
-- Written once: the settings for a table rewritten all the time are not needed any more.
ALTER TABLE outbox_requests RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
                                   autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_delay);

-- 5. The indexes of the new layout.
-- The claim: due ops in order. In-flight rows stay in it (the claim changes no indexed
-- column, so that it can be HOT) and are skipped by a heap check: at most the ops in flight.
CREATE INDEX outbox_queue_due_idx ON outbox_queue (next_attempt_at, id);
-- G8: each order key's head (lowest token, then sequence) and whether the key has an op in
-- flight. Partial on a column no claim changes; unordered ops have no entry.
CREATE INDEX outbox_queue_order_key_idx ON outbox_queue (order_key, fence, id)
    WHERE order_key IS NOT NULL;
-- G5: the few ops that expire with their token's generation, checked every claim cycle.
CREATE INDEX outbox_queue_generation_idx ON outbox_queue (id)
    WHERE expire_with_generation;
-- `list --state dead|cancelled|superseded`, `replay --state dead`, the console's attention
-- view: the few ops that need an operator, newest first, without the delivered history.
CREATE INDEX outbox_finished_attention_idx ON outbox_finished (state, id)
    WHERE state <> 'delivered';
-- Retention: finished ops by the time they finished. Rows are appended in about that order,
-- so a block range index finds them for a fraction of a B-tree's size and WAL.
CREATE INDEX outbox_finished_at_idx ON outbox_finished USING brin (finished_at);

-- 6. The old table's shape, read-only, for readers of ops: each op once, from its queue row
-- or its finished row (never both: the statement that deletes one inserts the other). A
-- filter on a column of either side is pushed into both halves of the union.
CREATE VIEW outbox_ops AS
SELECT r.id, r.op_id, r.resource, r.fence, r.owner_id, r.destination, r.idempotency_key,
       r.request_hash, r.order_key, r.partition, r.method, r.path, r.headers, r.content_type,
       r.body, r.expire_with_generation,
       CASE WHEN q.claimed_by_fence IS NULL THEN 'pending' ELSE 'in_flight' END AS state,
       q.attempts, q.next_attempt_at, q.claimed_by_fence, q.claimed_at, q.last_error,
       r.trace_context, r.created_at, NULL::timestamptz AS delivered_at,
       NULL::timestamptz AS finished_at, q.retry_base_attempts, q.retry_since,
       q.claimed_by_lease, r.trace_state, q.last_attempt_trace
FROM outbox_requests r
JOIN outbox_queue q ON q.id = r.id
UNION ALL
SELECT r.id, r.op_id, r.resource, r.fence, r.owner_id, r.destination, r.idempotency_key,
       r.request_hash, r.order_key, r.partition, r.method, r.path, r.headers, r.content_type,
       r.body, r.expire_with_generation, f.state, f.attempts, f.next_attempt_at,
       NULL::bigint, NULL::timestamptz, f.last_error, r.trace_context, r.created_at,
       CASE WHEN f.state = 'delivered' THEN f.finished_at END, f.finished_at,
       f.retry_base_attempts, f.retry_since, NULL::text, r.trace_state, f.last_attempt_trace
FROM outbox_requests r
JOIN outbox_finished f ON f.id = r.id;

-- 7. The claim over the queue: the same parameters and rules as
-- 0012_claim_room_per_destination.sql. An op is pending when its queue row has no claim; the
-- claim sets one and counts the attempt (a HOT update) and reads the request by its key.
-- One setting more: plan_cache_mode = force_generic_plan. PL/pgSQL's plan cache chose a custom
-- plan for this statement on every call (measured with pg_stat_statements.track_planning: 1,258
-- plans for 1,251 claims, 0.5 ms of planning each, more than the 0.3 ms the statement ran),
-- since the generic plan's estimate, made without the parameters' values, never beat the
-- custom ones. The generic plan is the plan wanted (the due index walked in order, with sorts
-- off), so it is made once per session and kept.
CREATE OR REPLACE FUNCTION outbox_op_claim_due(
    lease_resource text, lease_owner uuid, lease_fence bigint, partition_count integer,
    partition_index integer, destinations text[], room integer[], breakers text[],
    max_ops bigint, max_body_bytes bigint)
RETURNS TABLE (id bigint, op_id uuid, resource text, fence bigint, destination text,
               idempotency_key text, method text, path text, headers text, content_type text,
               body bytea, body_bytes bigint, attempts integer, created_at timestamptz,
               claimed_at timestamptz, trace_context text, trace_state text,
               last_attempt_trace text, budget_attempt integer, budget_since timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH lease AS (
        SELECT 1
        FROM outbox_leases
        WHERE outbox_leases.resource = lease_resource AND owner_id = lease_owner
          AND outbox_leases.fence = lease_fence AND expires_at > clock_timestamp()
        FOR SHARE
    ), candidates AS (
        SELECT q.id, q.destination, q.next_attempt_at
        FROM outbox_queue q
        WHERE EXISTS (SELECT 1 FROM lease)
          AND q.next_attempt_at <= clock_timestamp()
          AND q.claimed_by_fence IS NULL
          AND q.partition % partition_count = partition_index
          AND q.destination = ANY(destinations)
          AND q.destination <> ALL(ARRAY(
                SELECT d.destination FROM outbox_destinations d
                WHERE d.paused_at IS NOT NULL
                   OR (d.state <> 'closed' AND d.destination = ANY(breakers))))
          AND (q.order_key IS NULL OR NOT EXISTS (
                SELECT 1
                FROM outbox_queue x
                WHERE x.order_key = q.order_key
                  AND (x.claimed_by_fence IS NOT NULL OR (x.fence, x.id) < (q.fence, q.id))))
          AND NOT (q.expire_with_generation AND q.fence < (
                SELECT l.fence
                FROM outbox_requests r
                JOIN outbox_leases l ON l.resource = r.resource
                WHERE r.id = q.id))
        ORDER BY q.next_attempt_at, q.id
        LIMIT max_ops
        FOR UPDATE OF q SKIP LOCKED
    ), chosen AS (
        SELECT c.id
        FROM (SELECT c.id, c.destination,
                     row_number() OVER (PARTITION BY c.destination
                                        ORDER BY c.next_attempt_at, c.id) AS nth
              FROM candidates c) c
        JOIN unnest(destinations, room) AS d(name, ops) ON d.name = c.destination
        WHERE c.nth <= d.ops
    )
    UPDATE outbox_queue q
    SET claimed_by_fence = lease_fence,
        claimed_by_lease = lease_resource,
        claimed_at = clock_timestamp(),
        attempts = q.attempts + 1
    FROM chosen c, outbox_requests r
    WHERE q.id = c.id AND r.id = c.id
    RETURNING q.id, r.op_id, r.resource, r.fence, r.destination, r.idempotency_key, r.method,
              r.path, r.headers::text, r.content_type,
              CASE WHEN octet_length(r.body) <= max_body_bytes THEN r.body ELSE '\x'::bytea END,
              octet_length(r.body)::bigint, q.attempts,
              r.created_at, q.claimed_at, r.trace_context, r.trace_state, q.last_attempt_trace,
              q.attempts - q.retry_base_attempts,
              coalesce(q.retry_since, r.created_at);
END
$$;

-- 8. The SQL API's enqueue (0004_sql_api.sql) writes the request and its queue row in one
-- statement, and supersedes by moving queue rows to outbox_finished. Its signature, checks,
-- errors and answers are those of 0004.
CREATE OR REPLACE FUNCTION outbox.enqueue(resource text, owner_id uuid, token bigint,
                               destination text, method text, path text,
                               headers jsonb DEFAULT NULL, body bytea DEFAULT NULL,
                               content_type text DEFAULT NULL,
                               idempotency_key text DEFAULT NULL, order_key text DEFAULT NULL,
                               unordered boolean DEFAULT false, not_before interval DEFAULT NULL,
                               supersede_pending boolean DEFAULT false,
                               expire_with_generation boolean DEFAULT false,
                               traceparent text DEFAULT NULL)
RETURNS TABLE (op_id uuid, seq bigint, duplicate boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_method text := upper(enqueue.method);
    v_headers jsonb := coalesce(enqueue.headers, '[]'::jsonb);
    v_body bytea := coalesce(enqueue.body, ''::bytea);
    v_not_before interval := coalesce(enqueue.not_before, interval '0');
    v_order_key text;
    v_op_id uuid := outbox.new_op_id();
    v_hash bytea;
    v_seq bigint;
    v_notified bigint;
    seen record;
    found_op record;
BEGIN
    IF outbox.op_is_valid(enqueue.resource, enqueue.owner_id, enqueue.token,
                          enqueue.destination, enqueue.method, enqueue.path, v_headers, v_body,
                          enqueue.content_type, enqueue.idempotency_key, enqueue.order_key,
                          enqueue.unordered, v_not_before, enqueue.traceparent) IS NOT TRUE THEN
        PERFORM outbox.check_resource(enqueue.resource);
        PERFORM outbox.check_owner(enqueue.owner_id, enqueue.token);
        PERFORM outbox.check_op(enqueue.destination, enqueue.method, enqueue.path, v_headers,
                                v_body, enqueue.content_type, enqueue.idempotency_key,
                                enqueue.order_key, enqueue.unordered, v_not_before,
                                enqueue.traceparent);
    END IF;
    v_order_key := CASE
        WHEN coalesce(enqueue.unordered, false) THEN NULL
        ELSE coalesce(enqueue.order_key, enqueue.resource)
    END;
    v_hash := outbox.request_hash(v_method, enqueue.path, v_headers, enqueue.content_type, v_body);

    WITH request AS (
        INSERT INTO outbox_requests AS o (op_id, resource, fence, owner_id, destination,
                                          idempotency_key, request_hash, order_key, partition,
                                          method, path, headers, content_type, body,
                                          expire_with_generation, trace_context)
        SELECT v_op_id, enqueue.resource, enqueue.token, enqueue.owner_id, enqueue.destination,
               enqueue.idempotency_key, v_hash, v_order_key,
               outbox.partition_slot(v_order_key, v_op_id), v_method, enqueue.path, v_headers,
               enqueue.content_type, v_body, coalesce(enqueue.expire_with_generation, false),
               enqueue.traceparent
        FROM outbox_leases l
        WHERE l.resource = enqueue.resource
          AND l.owner_id = enqueue.owner_id
          AND l.fence = enqueue.token
          AND l.expires_at > clock_timestamp()
        FOR SHARE
        ON CONFLICT (destination, idempotency_key) DO NOTHING
        RETURNING o.id, o.partition, o.destination, o.fence, o.order_key, o.expire_with_generation
    ), queued AS (
        INSERT INTO outbox_queue AS q (id, next_attempt_at, partition, destination, fence,
                                       order_key, expire_with_generation)
        SELECT r.id,
               clock_timestamp() + floor(extract(epoch FROM v_not_before) * 1000)::bigint * interval '1 millisecond',
               r.partition, r.destination, r.fence, r.order_key, r.expire_with_generation
        FROM request r
        RETURNING q.id
    )
    SELECT queued.id,
           (SELECT count(pg_notify('outbox_ops', w.partition::text))
            FROM outbox_wakeups w
            WHERE w.listening)
    INTO v_seq, v_notified
    FROM queued;

    IF v_seq IS NOT NULL THEN
        IF coalesce(enqueue.supersede_pending, false) THEN
            -- Older tokens' pending ops of this resource and destination are never sent (G5).
            WITH gone AS (
                DELETE FROM outbox_queue q
                USING outbox_requests r
                WHERE r.id = q.id
                  AND r.resource = enqueue.resource
                  AND q.destination = enqueue.destination
                  AND q.fence < enqueue.token
                  AND q.claimed_by_fence IS NULL
                RETURNING q.id, q.attempts, q.next_attempt_at, q.retry_base_attempts,
                          q.retry_since, q.last_attempt_trace
            )
            INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at,
                                         last_error, retry_base_attempts, retry_since,
                                         last_attempt_trace)
            SELECT g.id, 'superseded', g.attempts, g.next_attempt_at, clock_timestamp(),
                   'superseded by token ' || enqueue.token, g.retry_base_attempts,
                   g.retry_since, g.last_attempt_trace
            FROM gone g;
        END IF;
        op_id := v_op_id;
        seq := v_seq;
        duplicate := false;
        RETURN NEXT;
        RETURN;
    END IF;

    SELECT l.owner_id, l.fence, l.expires_at > clock_timestamp() AS live INTO seen
    FROM outbox_leases l
    WHERE l.resource = enqueue.resource;
    IF NOT FOUND THEN
        PERFORM outbox.reject('no_lease', enqueue.resource, enqueue.owner_id, enqueue.token, NULL,
                              enqueue.destination, enqueue.idempotency_key);
    ELSIF seen.fence <> enqueue.token
          OR (seen.owner_id IS NOT NULL AND seen.owner_id <> enqueue.owner_id) THEN
        PERFORM outbox.reject('stale', enqueue.resource, enqueue.owner_id, enqueue.token, seen.fence,
                              enqueue.destination, enqueue.idempotency_key);
    ELSIF seen.owner_id IS NULL THEN
        PERFORM outbox.reject('no_lease', enqueue.resource, enqueue.owner_id, enqueue.token, seen.fence,
                              enqueue.destination, enqueue.idempotency_key);
    ELSIF NOT seen.live THEN
        PERFORM outbox.reject('expired', enqueue.resource, enqueue.owner_id, enqueue.token, NULL,
                              enqueue.destination, enqueue.idempotency_key);
    END IF;

    SELECT f.id, f.op_id, f.request_hash INTO found_op
    FROM outbox_requests f
    WHERE f.destination = enqueue.destination
      AND f.idempotency_key = enqueue.idempotency_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = 'the op holding this idempotency key is not visible to this transaction yet: retry';
    END IF;
    IF found_op.request_hash <> v_hash THEN
        RAISE EXCEPTION USING ERRCODE = 'OB004',
            MESSAGE = format('idempotency key %s of destination %s is already used for a different request by op %s',
                             enqueue.idempotency_key, enqueue.destination, found_op.op_id),
            DETAIL = json_build_object('existing_op_id', found_op.op_id,
                                       'destination', enqueue.destination,
                                       'idempotency_key', enqueue.idempotency_key)::text,
            HINT = 'the original op is kept and nothing was written; use another key for another request.';
    END IF;
    op_id := found_op.op_id;
    seq := found_op.id;
    duplicate := true;
    RETURN NEXT;
END
$$;
