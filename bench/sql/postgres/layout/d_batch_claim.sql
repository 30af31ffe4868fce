-- Layout d, the split without a per-op claim write (applied over c_split.sql): the partition
-- lease is the claim. One leader per partition (G9's fencing) means no other claimer can take
-- the same rows, so the claim reads the queue without locking or marking it and appends one
-- row per claimed batch: what a new leader must re-queue, with an `unknown` attempt each, if
-- this term ends with the batch unfinished. The leader keeps its in-flight ids in memory and
-- passes them to the claim (G8: nothing of a key in flight; no op claimed twice in a term).
CREATE TABLE outbox_claims (
    lease        text        NOT NULL,
    fence        bigint      NOT NULL,
    batch        bigint      GENERATED ALWAYS AS IDENTITY,
    claimed_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    ids          bigint[]    NOT NULL,
    attempts     integer[]   NOT NULL,
    PRIMARY KEY (lease, fence, batch)
);

SET bench.fillfactor = 'd';

CREATE FUNCTION outbox_claims_take_due(
    lease_resource text, lease_owner uuid, lease_fence bigint, partition_count integer,
    partition_index integer, destinations text[], room integer[], breakers text[],
    max_ops bigint, max_body_bytes bigint, in_flight bigint[])
RETURNS TABLE (id bigint, op_id uuid, resource text, fence bigint, destination text,
               idempotency_key text, method text, path text, headers text, content_type text,
               body bytea, body_bytes bigint, attempts integer, created_at timestamptz,
               trace_context text, trace_state text)
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
        SELECT q.id, q.destination, q.due_at, q.attempts + 1 AS attempt
        FROM outbox_queue q
        WHERE EXISTS (SELECT 1 FROM lease)
          AND q.id <> ALL(in_flight)
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
                  AND (x.id = ANY(in_flight) OR (x.fence, x.id) < (q.fence, q.id))))
          AND NOT (q.expire_with_generation AND q.fence < (
                SELECT l.fence FROM outbox_requests r JOIN outbox_leases l ON l.resource = r.resource
                WHERE r.id = q.id))
        ORDER BY q.due_at, q.id
        LIMIT max_ops
    ), chosen AS (
        SELECT r.id, r.attempt
        FROM (SELECT c.id, c.destination, c.attempt,
                     row_number() OVER (PARTITION BY c.destination ORDER BY c.due_at, c.id) AS nth
              FROM candidates c) r
        JOIN unnest(destinations, room) AS d(name, ops) ON d.name = r.destination
        WHERE r.nth <= d.ops
    ), batch AS (
        INSERT INTO outbox_claims (lease, fence, ids, attempts)
        SELECT lease_resource, lease_fence, array_agg(c.id), array_agg(c.attempt)
        FROM chosen c
        HAVING count(*) > 0
    )
    SELECT r.id, r.op_id, r.resource, r.fence, r.destination, r.idempotency_key, r.method,
           r.path, r.headers::text, r.content_type,
           CASE WHEN octet_length(r.body) <= max_body_bytes THEN r.body ELSE '\x'::bytea END,
           octet_length(r.body)::bigint, c.attempt, r.created_at,
           r.trace_context, r.trace_state
    FROM chosen c JOIN outbox_requests r ON r.id = c.id;
END
$$;

-- The completion: as c's, fenced by the lease alone (the queue row has no claim to check;
-- the lease's share lock keeps a takeover from committing under it).
CREATE FUNCTION outbox_claims_complete_batch(
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
        WHERE q.id = c.id AND c.state <> 'pending' AND EXISTS (SELECT 1 FROM lease)
        RETURNING q.id
    ), retried AS (
        UPDATE outbox_queue q
        SET attempts = c.attempt,
            due_at = clock_timestamp() + c.delay_ms * interval '1 millisecond'
        FROM c
        WHERE q.id = c.id AND c.state = 'pending' AND EXISTS (SELECT 1 FROM lease)
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

CREATE OR REPLACE PROCEDURE bench_drain()
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    l0 pg_lsn := pg_current_wal_lsn();
    ids bigint[];
    atts integer[];
    prev_ids bigint[] := '{}';
    prev_atts integer[];
    n integer;
    done integer := 0;
    claims integer := 0;
BEGIN
    LOOP
        SELECT array_agg(c.id), array_agg(c.attempts) INTO ids, atts
        FROM outbox_claims_take_due('dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, 1, 0,
                                    ARRAY['sink'], ARRAY[128], ARRAY[]::text[], 128, 1048576,
                                    prev_ids) c;
        COMMIT;
        claims := claims + 1;
        IF cardinality(prev_ids) > 0 THEN
            n := cardinality(prev_ids);
            SELECT count(*) INTO n
            FROM outbox_claims_complete_batch(
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
    CALL bench_record('d split, batch claim', 'delivery', done, t0, l0, claims || ' claims');
END
$$;
