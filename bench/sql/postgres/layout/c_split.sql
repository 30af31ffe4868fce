-- Layout c, the split with every guarantee's column and index (psql variable :fillfactor sets
-- the queue's). The request is written once and never updated; a narrow queue row per
-- unfinished op carries what the claim reads and changes, only the claim's index, and is
-- deleted when the op is finished; attempts and terminal states are appended.
CREATE TABLE outbox_leases (
    resource    text        PRIMARY KEY,
    owner_id    uuid        NULL,
    expires_at  timestamptz NULL,
    fence       bigint      NOT NULL DEFAULT 0,
    partitions  integer     NULL
) WITH (fillfactor = 70);

-- Holds (G13's pause, the breaker): read once per claim, as today.
CREATE TABLE outbox_destinations (
    destination  text        PRIMARY KEY,
    state        text        NOT NULL DEFAULT 'closed',
    paused_at    timestamptz NULL,
    paused_by    text        NULL
);

CREATE TABLE outbox_wakeups (
    partition   integer     PRIMARY KEY,
    listening   boolean     NOT NULL DEFAULT false
);

-- The op's request: what the producer sent, written once (G3, G7, show, list --resource).
-- The validation of today's thirteen CHECKs as one constraint (see checks.sql).
CREATE TABLE outbox_requests (
    id                      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    op_id                   uuid        NOT NULL UNIQUE,
    resource                text        NOT NULL,
    fence                   bigint      NOT NULL,
    owner_id                uuid        NOT NULL,
    destination             text        NOT NULL,
    idempotency_key         text        NOT NULL,
    request_hash            bytea       NOT NULL,
    order_key               text        NULL,
    slot                    smallint    NOT NULL,
    method                  text        NOT NULL,
    path                    text        NOT NULL,
    headers                 jsonb       NOT NULL,
    content_type            text        NULL,
    body                    bytea       NOT NULL,
    expire_with_generation  boolean     NOT NULL,
    trace_context           text        NULL,
    trace_state             text        NULL,
    created_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT outbox_requests_destination_key UNIQUE (destination, idempotency_key),
    CONSTRAINT outbox_requests_valid CHECK (
        method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')
        AND destination ~ '^[a-z0-9_-]{1,64}$'
        AND char_length(idempotency_key) BETWEEN 1 AND 255
        AND slot BETWEEN 0 AND 1023
        AND path ~ '^/[!-~]*$' AND left(path, 2) <> '//' AND octet_length(path) <= 2048
        AND octet_length(body) <= 16777216
        AND jsonb_typeof(headers) = 'array'
        AND coalesce(octet_length(trace_state), 0) <= 512)
);
-- list --resource, and supersede's walk over one resource's ops (G5).
CREATE INDEX outbox_requests_resource_idx ON outbox_requests (resource, id);
-- expire_with_generation (G5): the few flagged ops by token.
CREATE INDEX outbox_requests_generation_idx ON outbox_requests (resource, fence)
    WHERE expire_with_generation;

-- One narrow row per unfinished op. The claim changes claimed_fence, claimed_lease,
-- claimed_at and attempts, none of them indexed, so with room on the page it is a HOT update.
-- In-flight rows stay in the due index; the claim skips them by a heap check.
CREATE TABLE outbox_queue (
    id                      bigint      PRIMARY KEY,  -- outbox_requests.id
    due_at                  timestamptz NOT NULL,
    slot                    smallint    NOT NULL,     -- G12: partition = slot % partitions
    destination             text        NOT NULL,
    fence                   bigint      NOT NULL,     -- G8: an order key's head by (fence, id)
    order_key               text        NULL,
    expire_with_generation  boolean     NOT NULL,
    attempts                integer     NOT NULL DEFAULT 0,
    claimed_fence           bigint      NULL,         -- G9: what a term left in flight
    claimed_lease           text        NULL,
    claimed_at              timestamptz NULL
) WITH (fillfactor = :fillfactor);
CREATE INDEX outbox_queue_due_idx ON outbox_queue (due_at, id);
-- G8: the ops of one order key; empty for unordered ops.
CREATE INDEX outbox_queue_order_key_idx ON outbox_queue (order_key, fence, id)
    WHERE order_key IS NOT NULL;

-- One row per attempt, appended (G6): keyed by the request's id.
CREATE TABLE outbox_attempts (
    op                bigint      NOT NULL,
    attempt           integer     NOT NULL,
    dispatcher_fence  bigint      NOT NULL,
    started_at        timestamptz NOT NULL,
    finished_at       timestamptz NULL,
    outcome           text        NOT NULL,
    http_status       integer     NULL,
    error             text        NULL,
    response_excerpt  text        NULL,
    trace_context     text        NULL,
    PRIMARY KEY (op, attempt),
    CONSTRAINT outbox_attempts_valid CHECK (outcome IN ('delivered', 'failed', 'unknown')
        AND coalesce(char_length(error), 0) <= 2048
        AND coalesce(char_length(response_excerpt), 0) <= 1024)
);

-- One row per finished op, appended when it leaves the queue: its terminal state.
CREATE TABLE outbox_finished (
    id           bigint      PRIMARY KEY,   -- outbox_requests.id
    state        text        NOT NULL,
    finished_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_error   text        NULL,
    CONSTRAINT outbox_finished_state CHECK (state IN ('delivered', 'dead', 'cancelled', 'superseded'))
);
-- list --state dead|cancelled|superseded, the console's attention view: delivered ops, the
-- bulk, are not in it.
CREATE INDEX outbox_finished_attention_idx ON outbox_finished (state, id) WHERE state <> 'delivered';
-- Retention by finish time: a BRIN range per block, appended in time order.
CREATE INDEX outbox_finished_at_brin ON outbox_finished USING brin (finished_at);

INSERT INTO outbox_leases (resource, owner_id, expires_at, fence)
VALUES ('orders', '00000000-0000-0000-0000-000000000001', 'infinity', 1),
       ('dispatcher/0', '00000000-0000-0000-0000-000000000002', 'infinity', 1);
INSERT INTO outbox_destinations (destination) VALUES ('sink');

SET bench.fillfactor = :fillfactor;

-- The fenced enqueue (as op_insert_new_if_lease_held.sql): request and queue row in one statement.
CREATE PROCEDURE bench_enqueue(n integer)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    l0 pg_lsn := pg_current_wal_lsn();
    oid uuid;
    new_id bigint;
    notified bigint;
BEGIN
    FOR i IN 1..n LOOP
        oid := gen_random_uuid();
        WITH r AS (
            INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination,
                                         idempotency_key, request_hash, order_key, slot, method,
                                         path, headers, content_type, body,
                                         expire_with_generation, trace_context, trace_state)
            SELECT oid, 'orders', 1, '00000000-0000-0000-0000-000000000001', 'sink',
                   'order-' || i || '-created', sha256(int4send(i)), NULL, i % 1024, 'POST',
                   '/hooks/orders/' || i, bench_headers(i), 'application/json', bench_body(i), false,
                   '00-' || md5(i::text) || '-' || left(md5(i::text), 16) || '-01', NULL
            FROM outbox_leases
            WHERE resource = 'orders'
              AND owner_id = '00000000-0000-0000-0000-000000000001'
              AND fence = 1
              AND expires_at > clock_timestamp()
            FOR SHARE
            RETURNING id, slot, destination, fence, order_key, expire_with_generation
        ), q AS (
            INSERT INTO outbox_queue (id, due_at, slot, destination, fence, order_key,
                                      expire_with_generation)
            SELECT id, clock_timestamp() + 0::bigint * interval '1 millisecond', slot,
                   destination, fence, order_key, expire_with_generation
            FROM r
        )
        SELECT id, (SELECT count(pg_notify('outbox_ops', partition::text))
                    FROM outbox_wakeups WHERE listening)
        INTO new_id, notified FROM r;
        COMMIT;
    END LOOP;
    CALL bench_record(CASE current_setting('bench.fillfactor', true) WHEN 'd' THEN 'd split, batch claim' ELSE 'c split ff' || current_setting('bench.fillfactor', true) END, 'enqueue', n, t0, l0);
END
$$;

-- The claim (as outbox_op_claim_due): due, unclaimed queue rows of the partition, not held,
-- each order key's head only and none of a key with one in flight (G8), no op of an outdated
-- generation (G5); of each destination at most its room. It marks the queue rows (HOT) and
-- reads the requests by primary key for the payload.
CREATE FUNCTION outbox_queue_claim_due(
    lease_resource text, lease_owner uuid, lease_fence bigint, partition_count integer,
    partition_index integer, destinations text[], room integer[], breakers text[],
    max_ops bigint, max_body_bytes bigint)
RETURNS TABLE (id bigint, op_id uuid, resource text, fence bigint, destination text,
               idempotency_key text, method text, path text, headers text, content_type text,
               body bytea, body_bytes bigint, attempts integer, created_at timestamptz,
               claimed_at timestamptz, trace_context text, trace_state text)
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET jit = off
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
        SELECT q.id, q.destination, q.due_at
        FROM outbox_queue q
        WHERE EXISTS (SELECT 1 FROM lease)
          AND q.claimed_fence IS NULL
          AND q.due_at <= clock_timestamp()
          AND q.slot % partition_count = partition_index
          AND q.destination = ANY(destinations)
          AND q.destination <> ALL(ARRAY(
                SELECT d.destination FROM outbox_destinations d
                WHERE d.paused_at IS NOT NULL
                   OR (d.state <> 'closed' AND d.destination = ANY(breakers))))
          AND (q.order_key IS NULL OR NOT EXISTS (
                SELECT 1
                FROM outbox_queue x
                WHERE x.order_key = q.order_key
                  AND (x.claimed_fence IS NOT NULL OR (x.fence, x.id) < (q.fence, q.id))))
          AND NOT (q.expire_with_generation AND q.fence < (
                SELECT l.fence FROM outbox_requests r JOIN outbox_leases l ON l.resource = r.resource
                WHERE r.id = q.id))
        ORDER BY q.due_at, q.id
        LIMIT max_ops
        FOR UPDATE OF q SKIP LOCKED
    ), chosen AS (
        SELECT r.id
        FROM (SELECT c.id, c.destination,
                     row_number() OVER (PARTITION BY c.destination ORDER BY c.due_at, c.id) AS nth
              FROM candidates c) r
        JOIN unnest(destinations, room) AS d(name, ops) ON d.name = r.destination
        WHERE r.nth <= d.ops
    ), claimed AS (
        UPDATE outbox_queue q
        SET claimed_fence = lease_fence,
            claimed_lease = lease_resource,
            claimed_at = clock_timestamp(),
            attempts = q.attempts + 1
        FROM chosen c
        WHERE q.id = c.id
        RETURNING q.id, q.attempts, q.claimed_at
    )
    SELECT r.id, r.op_id, r.resource, r.fence, r.destination, r.idempotency_key, r.method,
           r.path, r.headers::text, r.content_type,
           CASE WHEN octet_length(r.body) <= max_body_bytes THEN r.body ELSE '\x'::bytea END,
           octet_length(r.body)::bigint, c.attempts, r.created_at, c.claimed_at,
           r.trace_context, r.trace_state
    FROM claimed c JOIN outbox_requests r ON r.id = c.id;
END
$$;

-- The completion of a batch (as op_complete_batch_if_claimed.sql): finished ops leave the
-- queue and get their terminal row, a retry releases its queue row with a new due time (not
-- HOT: due_at is indexed; retries are the rare case), every one gets its attempt row.
CREATE FUNCTION outbox_queue_complete_batch_if_claimed(
    lease_resource text, lease_owner uuid, lease_fence bigint, ids bigint[], states text[],
    delays_ms bigint[], errors text[], attempt_numbers integer[], started timestamptz[],
    outcomes text[], statuses integer[], excerpts text[], traces text[])
RETURNS SETOF bigint
LANGUAGE sql VOLATILE
SET jit = off
AS $$
    WITH lease AS (
        SELECT 1 FROM outbox_leases
        WHERE resource = lease_resource AND owner_id = lease_owner AND fence = lease_fence
        FOR SHARE
    ), c AS (
        SELECT *
        FROM unnest(ids, states, delays_ms, errors, attempt_numbers, started, outcomes,
                    statuses, excerpts, traces)
             AS c(id, state, delay_ms, error, attempt, started_at, outcome, http_status,
                  excerpt, trace)
    ), finished AS (
        DELETE FROM outbox_queue q
        USING c
        WHERE q.id = c.id AND c.state <> 'pending'
          AND q.claimed_fence = lease_fence AND q.claimed_lease = lease_resource
          AND EXISTS (SELECT 1 FROM lease)
        RETURNING q.id
    ), retried AS (
        UPDATE outbox_queue q
        SET claimed_fence = NULL, claimed_lease = NULL, claimed_at = NULL,
            due_at = clock_timestamp() + c.delay_ms * interval '1 millisecond'
        FROM c
        WHERE q.id = c.id AND c.state = 'pending'
          AND q.claimed_fence = lease_fence AND q.claimed_lease = lease_resource
          AND EXISTS (SELECT 1 FROM lease)
        RETURNING q.id
    ), applied AS (
        SELECT id FROM finished UNION ALL SELECT id FROM retried
    ), attempts AS (
        INSERT INTO outbox_attempts (op, attempt, dispatcher_fence, started_at, finished_at,
                                     outcome, http_status, error, response_excerpt, trace_context)
        SELECT c.id, c.attempt, lease_fence, c.started_at, clock_timestamp(), c.outcome,
               c.http_status, c.error, c.excerpt, c.trace
        FROM applied a JOIN c ON c.id = a.id
    ), terminal AS (
        INSERT INTO outbox_finished (id, state, last_error)
        SELECT c.id, c.state, c.error
        FROM finished f JOIN c ON c.id = f.id
    )
    SELECT id FROM applied
$$;

CREATE PROCEDURE bench_drain()
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    l0 pg_lsn := pg_current_wal_lsn();
    ids bigint[];
    atts integer[];
    prev_ids bigint[];
    prev_atts integer[];
    n integer;
    done integer := 0;
    claims integer := 0;
BEGIN
    LOOP
        SELECT array_agg(c.id), array_agg(c.attempts) INTO ids, atts
        FROM outbox_queue_claim_due('dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, 1, 0,
                                    ARRAY['sink'], ARRAY[128], ARRAY[]::text[], 128, 1048576) c;
        COMMIT;
        claims := claims + 1;
        IF prev_ids IS NOT NULL THEN
            n := cardinality(prev_ids);
            SELECT count(*) INTO n
            FROM outbox_queue_complete_batch_if_claimed(
                'dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, prev_ids,
                array_fill('delivered'::text, ARRAY[n]), array_fill(0::bigint, ARRAY[n]),
                array_fill(NULL::text, ARRAY[n]), prev_atts, array_fill(clock_timestamp(), ARRAY[n]),
                array_fill('delivered'::text, ARRAY[n]), array_fill(200, ARRAY[n]),
                array_fill('{"ok":true}'::text, ARRAY[n]), array_fill(NULL::text, ARRAY[n]));
            COMMIT;
            done := done + n;
        END IF;
        EXIT WHEN ids IS NULL;
        prev_ids := ids;
        prev_atts := atts;
    END LOOP;
    CALL bench_record('c split ff' || current_setting('bench.fillfactor', true), 'delivery', done,
                      t0, l0, claims || ' claims');
END
$$;
