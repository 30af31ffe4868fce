-- Least privilege for the outbox's own components (issue 37): a role each for the dispatcher,
-- the operator (outboxctl's changes) and the viewer (status, list, show, the console), beside
-- 0015's outbox_producer, which gets outbox.enqueue_batch, the Rust producer's enqueue when its
-- login holds that role alone. Each holds the rights its statements need and no more:
--
-- outbox_dispatcher  reads requests; claims, completes, releases and re-queues queue rows;
--                    appends attempts and finished rows; purges past retention; keeps its
--                    partition leases (rows 'dispatcher/…' of outbox_leases only, by row-level
--                    security), its membership, wake-ups, destination health and holds. It may
--                    not write a request (no enqueue of its own) nor any producer's lease.
-- outbox_operator    reads everything; replays, cancels, purges, pauses and resumes, sets the
--                    partition count, each logged in outbox_admin_log. It may not write a
--                    request nor a lease.
-- outbox_viewer      reads every column but an op's body, its header values and its request
--                    hash: the view outbox_request_meta gives a body's size and the header
--                    names instead. It writes nothing.
--
-- As with 0015, roles belong to the cluster: they are created when missing and when the
-- migrating role may (CREATEROLE or superuser). Otherwise this says so (NOTICE), and once a
-- role administrator has run CREATE ROLE … NOLOGIN for each, the schema's owner runs
-- SELECT outbox.grant_roles(); (README, "Security"). Granting is the owner's: it names the
-- tables and creates the lease policies.

-- 1. A request without its content: what a viewer reads in place of outbox_requests' body and
-- headers. A simple view, so a statement reading it is planned as if it read the table.
CREATE VIEW outbox_request_meta AS
SELECT r.id, r.op_id, r.resource, r.fence, r.owner_id, r.destination, r.idempotency_key,
       r.order_key, r.partition, r.method, r.path, r.content_type, r.expire_with_generation,
       r.trace_context, r.trace_state, r.created_at,
       octet_length(r.body)::bigint AS body_bytes,
       (SELECT coalesce(jsonb_agg(h -> 0 ORDER BY n), '[]'::jsonb)
        FROM jsonb_array_elements(r.headers) WITH ORDINALITY AS e(h, n))::text AS header_names
FROM outbox_requests r;

-- 2. The Rust producer's enqueue for a login holding outbox_producer alone: the batch enqueue
-- statement (store/sql/postgres/op_insert_batch_if_lease_held.sql, its arrays, one element per
-- op) and the decisions store/src/enqueue.rs makes after it, in one call that runs with its
-- owner's rights. Every op or none: the lease is share-locked and checked in the insert (G4);
-- a key that holds the same request is a duplicate, another request a conflict (G7), raised as
-- outbox.enqueue raises them (OB001-OB004), which rolls the whole call back; supersede_pending
-- moves older tokens' pending ops of the resource and destination to superseded (G5). The
-- caller computed the request hash and the partition (as outbox.request_hash and
-- outbox.partition_slot do): wrong ones harm only its own ops, so they are checked for shape,
-- not recomputed. The body's size is the caller's limit (at most 16 MiB).
-- Returns one row per op, in order: its op id, row id, whether it existed (the same request)
-- and its state.
CREATE FUNCTION outbox.enqueue_batch(resource text, owner_id uuid, token bigint,
                                     op_ids uuid[], destinations text[],
                                     idempotency_keys text[], request_hashes bytea[],
                                     order_keys text[], partitions integer[], methods text[],
                                     paths text[], headers text[], content_types text[],
                                     bodies bytea[], expire_with_generation boolean[],
                                     delays_ms bigint[], traceparents text[],
                                     tracestates text[], supersede_pending boolean[])
RETURNS TABLE (op_id uuid, seq bigint, duplicate boolean, state text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    n integer := cardinality(op_ids);
    inserted_ids bigint[];
    inserted_op_ids uuid[];
    v_notified bigint;
    seen record;
    found_op record;
    v_headers jsonb;
BEGIN
    IF n IS NULL OR n = 0 OR n > 1000 THEN
        PERFORM outbox.refuse('ops', 'must hold 1..=1000 ops');
    END IF;
    IF EXISTS (SELECT 1
               FROM unnest(ARRAY[cardinality(destinations), cardinality(idempotency_keys),
                   cardinality(request_hashes), cardinality(order_keys), cardinality(partitions),
                   cardinality(methods), cardinality(paths), cardinality(headers),
                   cardinality(content_types), cardinality(bodies),
                   cardinality(expire_with_generation), cardinality(delays_ms),
                   cardinality(traceparents), cardinality(tracestates),
                   cardinality(supersede_pending)]) AS c(len)
               WHERE c.len IS DISTINCT FROM n) THEN
        PERFORM outbox.refuse('ops', 'every array must hold one element per op');
    END IF;
    -- Every op checked in one statement (outbox.op_is_valid inlined in it), as outbox.enqueue
    -- checks its one, but the body's size (the caller's limit, up to 16 MiB); only when one
    -- fails are they checked again one by one, to name the field.
    IF (SELECT bool_and(u.op_id IS NOT NULL AND u.method = upper(u.method)
                        AND u.body IS NOT NULL AND octet_length(u.body) <= 16777216
                        AND octet_length(u.request_hash) = 32
                        AND u.partition BETWEEN 0 AND 1023
                        AND u.expire IS NOT NULL AND u.supersede IS NOT NULL
                        AND (u.tracestate IS NULL
                             OR (octet_length(u.tracestate) <= 512
                                 AND u.tracestate ~ '^[ -~]*$'))
                        AND outbox.op_is_valid(enqueue_batch.resource, enqueue_batch.owner_id,
                                               enqueue_batch.token, u.destination, u.method,
                                               u.path, u.headers::jsonb, ''::bytea,
                                               u.content_type, u.idempotency_key, u.order_key,
                                               false, u.delay_ms * interval '1 millisecond',
                                               u.traceparent))
        FROM unnest(op_ids, destinations, idempotency_keys, request_hashes, order_keys,
                    partitions, methods, paths, headers, content_types, bodies,
                    expire_with_generation, delays_ms, traceparents, tracestates,
                    supersede_pending)
             AS u(op_id, destination, idempotency_key, request_hash, order_key, partition,
                  method, path, headers, content_type, body, expire, delay_ms, traceparent,
                  tracestate, supersede)) IS NOT TRUE THEN
        PERFORM outbox.check_resource(enqueue_batch.resource);
        PERFORM outbox.check_owner(enqueue_batch.owner_id, enqueue_batch.token);
        FOR i IN 1 .. n LOOP
            BEGIN
                v_headers := headers[i]::jsonb;
            EXCEPTION WHEN invalid_text_representation THEN
                PERFORM outbox.refuse('headers', 'must be a JSON array of [name, value] pairs');
            END;
            PERFORM outbox.check_op(destinations[i], methods[i], paths[i], v_headers,
                                    ''::bytea, content_types[i], idempotency_keys[i],
                                    order_keys[i], false,
                                    delays_ms[i] * interval '1 millisecond', traceparents[i]);
            IF op_ids[i] IS NULL THEN
                PERFORM outbox.refuse('op_id', 'is required');
            ELSIF methods[i] <> upper(methods[i]) THEN
                PERFORM outbox.refuse('method', 'must be upper case');
            ELSIF bodies[i] IS NULL OR octet_length(bodies[i]) > 16777216 THEN
                PERFORM outbox.refuse('body', 'is required (empty for none) and at most 16 MiB');
            ELSIF octet_length(request_hashes[i]) IS DISTINCT FROM 32 THEN
                PERFORM outbox.refuse('request_hash', 'must be 32 bytes (SHA-256)');
            ELSIF partitions[i] IS NULL OR partitions[i] NOT BETWEEN 0 AND 1023 THEN
                PERFORM outbox.refuse('partition', 'must be 0..=1023');
            ELSIF expire_with_generation[i] IS NULL OR supersede_pending[i] IS NULL THEN
                PERFORM outbox.refuse('op', 'expire_with_generation and supersede_pending are required');
            ELSIF tracestates[i] IS NOT NULL AND (octet_length(tracestates[i]) > 512
                                                  OR tracestates[i] !~ '^[ -~]*$') THEN
                PERFORM outbox.refuse('tracestate', 'must be at most 512 bytes of visible ASCII');
            END IF;
        END LOOP;
        PERFORM outbox.refuse('op', 'is not valid');
    END IF;

    WITH lease AS (
        SELECT 1
        FROM outbox_leases l
        WHERE l.resource = enqueue_batch.resource AND l.owner_id = enqueue_batch.owner_id
          AND l.fence = enqueue_batch.token AND l.expires_at > clock_timestamp()
        FOR SHARE
    ), u AS (
        SELECT *
        FROM unnest(op_ids, destinations, idempotency_keys, request_hashes, order_keys,
                    partitions, methods, paths, headers, content_types, bodies,
                    expire_with_generation, delays_ms, traceparents, tracestates)
             WITH ORDINALITY
             AS u(op_id, destination, idempotency_key, request_hash, order_key, partition,
                  method, path, headers, content_type, body, expire_with_generation, delay_ms,
                  trace_context, trace_state, ord)
    ), inserted AS (
        INSERT INTO outbox_requests AS r (op_id, resource, fence, owner_id, destination,
                                          idempotency_key, request_hash, order_key, partition,
                                          method, path, headers, content_type, body,
                                          expire_with_generation, trace_context, trace_state)
        SELECT u.op_id, enqueue_batch.resource, enqueue_batch.token, enqueue_batch.owner_id,
               u.destination, u.idempotency_key, u.request_hash, u.order_key, u.partition,
               u.method, u.path, u.headers::jsonb, u.content_type, u.body,
               u.expire_with_generation, u.trace_context, u.trace_state
        FROM u
        WHERE EXISTS (SELECT 1 FROM lease)
        ORDER BY u.ord
        ON CONFLICT (destination, idempotency_key) DO NOTHING
        RETURNING r.id, r.op_id, r.partition, r.destination, r.fence, r.order_key,
                  r.expire_with_generation
    ), queued AS (
        INSERT INTO outbox_queue AS q (id, next_attempt_at, partition, destination, fence,
                                       order_key, expire_with_generation)
        SELECT i.id, clock_timestamp() + u.delay_ms * interval '1 millisecond', i.partition,
               i.destination, i.fence, i.order_key, i.expire_with_generation
        FROM inserted i
        JOIN u ON u.op_id = i.op_id
        RETURNING q.id
    )
    SELECT (SELECT coalesce(array_agg(i.id), '{}') FROM inserted i),
           (SELECT coalesce(array_agg(i.op_id), '{}') FROM inserted i),
           (SELECT count(pg_notify('outbox_ops', 'batch'))
            FROM (SELECT 1 FROM queued LIMIT 1) AS any_inserted
            WHERE EXISTS (SELECT 1 FROM outbox_wakeups w WHERE w.listening))
    INTO inserted_ids, inserted_op_ids, v_notified;

    IF cardinality(inserted_ids) = 0 THEN
        SELECT l.owner_id, l.fence, l.expires_at > clock_timestamp() AS live INTO seen
        FROM outbox_leases l
        WHERE l.resource = enqueue_batch.resource;
        IF NOT FOUND THEN
            PERFORM outbox.reject('no_lease', enqueue_batch.resource, enqueue_batch.owner_id,
                                  enqueue_batch.token, NULL, destinations[1],
                                  idempotency_keys[1]);
        ELSIF seen.fence <> enqueue_batch.token
              OR (seen.owner_id IS NOT NULL AND seen.owner_id <> enqueue_batch.owner_id) THEN
            PERFORM outbox.reject('stale', enqueue_batch.resource, enqueue_batch.owner_id,
                                  enqueue_batch.token, seen.fence, destinations[1],
                                  idempotency_keys[1]);
        ELSIF seen.owner_id IS NULL THEN
            PERFORM outbox.reject('no_lease', enqueue_batch.resource, enqueue_batch.owner_id,
                                  enqueue_batch.token, seen.fence, destinations[1],
                                  idempotency_keys[1]);
        ELSIF NOT seen.live THEN
            PERFORM outbox.reject('expired', enqueue_batch.resource, enqueue_batch.owner_id,
                                  enqueue_batch.token, NULL, destinations[1],
                                  idempotency_keys[1]);
        END IF;
    END IF;

    -- Older tokens' pending ops of this resource, once per destination asked (G5).
    IF true = ANY(supersede_pending) THEN
        WITH asked AS (
            SELECT DISTINCT d.destination
            FROM unnest(destinations, supersede_pending, op_ids) AS d(destination, supersede, op_id)
            WHERE d.supersede AND d.op_id = ANY(inserted_op_ids)
        ), gone AS (
            DELETE FROM outbox_queue q
            USING outbox_requests r, asked a
            WHERE r.id = q.id
              AND r.resource = enqueue_batch.resource
              AND q.destination = a.destination
              AND q.fence < enqueue_batch.token
              AND q.claimed_by_fence IS NULL
            RETURNING q.id, q.attempts, q.next_attempt_at, q.retry_base_attempts, q.retry_since,
                      q.last_attempt_trace
        )
        INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                                     retry_base_attempts, retry_since, last_attempt_trace)
        SELECT g.id, 'superseded', g.attempts, g.next_attempt_at, clock_timestamp(),
               'superseded by token ' || enqueue_batch.token, g.retry_base_attempts, g.retry_since,
               g.last_attempt_trace
        FROM gone g;
    END IF;

    FOR i IN 1 .. n LOOP
        IF op_ids[i] = ANY(inserted_op_ids) THEN
            op_id := op_ids[i];
            seq := inserted_ids[array_position(inserted_op_ids, op_ids[i])];
            duplicate := false;
            state := 'pending';
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT o.id, o.op_id, o.request_hash, o.state INTO found_op
        FROM outbox_ops o
        WHERE o.destination = destinations[i] AND o.idempotency_key = idempotency_keys[i];
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
                MESSAGE = 'the op holding this idempotency key is not visible to this transaction yet: retry';
        END IF;
        IF found_op.request_hash <> request_hashes[i] THEN
            RAISE EXCEPTION USING ERRCODE = 'OB004',
                MESSAGE = format('idempotency key %s of destination %s is already used for a different request by op %s',
                                 idempotency_keys[i], destinations[i], found_op.op_id),
                DETAIL = json_build_object('existing_op_id', found_op.op_id,
                                           'destination', destinations[i],
                                           'idempotency_key', idempotency_keys[i])::text,
                HINT = 'the original op is kept and nothing was written; use another key for another request.';
        END IF;
        op_id := found_op.op_id;
        seq := found_op.id;
        duplicate := true;
        state := found_op.state;
        RETURN NEXT;
    END LOOP;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION outbox.enqueue_batch(text, uuid, bigint, uuid[], text[], '
                   'text[], bytea[], text[], integer[], text[], text[], text[], text[], bytea[], '
                   'boolean[], bigint[], text[], text[], boolean[]) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION outbox.enqueue_batch(text, uuid, bigint, uuid[], text[], text[],
    bytea[], text[], integer[], text[], text[], text[], text[], bytea[], boolean[], bigint[],
    text[], text[], boolean[]) FROM PUBLIC;

-- 3. Grants to the four roles (and 0015's), their creation when missing and allowed, and the
-- row-level policies that keep a dispatcher's lease writes to its partition leases.
CREATE FUNCTION outbox.grant_roles() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r text;
    missing text[] := '{}';
    may_create boolean := (SELECT rolsuper OR rolcreaterole FROM pg_roles
                           WHERE rolname = current_user);
BEGIN
    PERFORM outbox.grant_producer_role();
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_producer') THEN
        GRANT EXECUTE ON FUNCTION outbox.enqueue_batch(text, uuid, bigint, uuid[], text[],
            text[], bytea[], text[], integer[], text[], text[], text[], text[], bytea[],
            boolean[], bigint[], text[], text[], boolean[]) TO outbox_producer;
    END IF;
    FOREACH r IN ARRAY ARRAY['outbox_dispatcher', 'outbox_operator', 'outbox_viewer'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            IF NOT may_create THEN
                missing := missing || r;
                CONTINUE;
            END IF;
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL; -- another database of the cluster created it meanwhile
            END;
        END IF;
    END LOOP;
    IF cardinality(missing) > 0 THEN
        RAISE NOTICE 'the roles % do not exist and % may not create roles: a role administrator '
                     'runs CREATE ROLE <name> NOLOGIN for each, then the schema''s owner runs '
                     'SELECT outbox.grant_roles() (README, "Security")', missing, current_user;
        RETURN false;
    END IF;

    -- The dispatcher.
    GRANT USAGE ON SCHEMA outbox TO outbox_dispatcher;
    GRANT SELECT ON outbox_requests, outbox_queue, outbox_finished, outbox_attempts,
                    outbox_leases, outbox_destinations, outbox_destination_holds,
                    outbox_dispatchers, outbox_partition_count, outbox_wakeups,
                    outbox_rejections, outbox_schema_migrations
        TO outbox_dispatcher;
    GRANT UPDATE, DELETE ON outbox_queue TO outbox_dispatcher;
    GRANT INSERT, DELETE ON outbox_finished, outbox_attempts TO outbox_dispatcher;
    -- The retention purge locks the finished rows it deletes (FOR UPDATE needs UPDATE).
    GRANT UPDATE ON outbox_finished TO outbox_dispatcher;
    GRANT DELETE ON outbox_requests TO outbox_dispatcher;
    GRANT INSERT, UPDATE ON outbox_leases, outbox_destinations, outbox_partition_count,
                            outbox_wakeups
        TO outbox_dispatcher;
    GRANT INSERT, DELETE ON outbox_destination_holds TO outbox_dispatcher;
    GRANT INSERT, UPDATE, DELETE ON outbox_dispatchers TO outbox_dispatcher;
    GRANT EXECUTE ON FUNCTION outbox_op_claim_due(text, uuid, bigint, integer, integer, text[],
                                                  integer[], text[], bigint, bigint)
        TO outbox_dispatcher;

    -- The operator.
    GRANT USAGE ON SCHEMA outbox TO outbox_operator;
    GRANT SELECT ON outbox_requests, outbox_queue, outbox_finished, outbox_attempts,
                    outbox_leases, outbox_destinations, outbox_destination_holds,
                    outbox_dispatchers, outbox_partition_count, outbox_wakeups,
                    outbox_rejections, outbox_schema_migrations, outbox_admin_log, outbox_ops,
                    outbox_request_meta
        TO outbox_operator;
    GRANT INSERT, UPDATE, DELETE ON outbox_queue, outbox_finished TO outbox_operator;
    GRANT DELETE ON outbox_requests, outbox_attempts TO outbox_operator;
    GRANT INSERT, UPDATE ON outbox_destinations, outbox_partition_count TO outbox_operator;
    GRANT INSERT ON outbox_destination_holds, outbox_admin_log TO outbox_operator;

    -- The viewer: every column but the content, and the view that sums the content up.
    GRANT USAGE ON SCHEMA outbox TO outbox_viewer;
    GRANT SELECT (id, op_id, resource, fence, owner_id, destination, idempotency_key,
                  order_key, partition, method, path, content_type, expire_with_generation,
                  trace_context, trace_state, created_at)
        ON outbox_requests TO outbox_viewer;
    GRANT SELECT (id, op_id, resource, fence, owner_id, destination, idempotency_key,
                  order_key, partition, method, path, content_type, expire_with_generation,
                  state, attempts, next_attempt_at, claimed_by_fence, claimed_at, last_error,
                  trace_context, created_at, delivered_at, finished_at, retry_base_attempts,
                  retry_since, claimed_by_lease, trace_state, last_attempt_trace)
        ON outbox_ops TO outbox_viewer;
    GRANT SELECT ON outbox_request_meta, outbox_queue, outbox_finished, outbox_attempts,
                    outbox_leases, outbox_destinations, outbox_destination_holds,
                    outbox_dispatchers, outbox_partition_count, outbox_wakeups,
                    outbox_rejections, outbox_schema_migrations, outbox_admin_log
        TO outbox_viewer;

    -- The leases: whoever could write them before keeps doing so (a permissive policy for
    -- everyone); a dispatcher's writes are held to its partition leases (restrictive ones).
    -- The table's owner, and so the SQL API's functions, are not subject to them.
    ALTER TABLE outbox_leases ENABLE ROW LEVEL SECURITY;
    IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = 'outbox_leases'::regclass) THEN
        CREATE POLICY outbox_leases_everyone ON outbox_leases
            AS PERMISSIVE FOR ALL TO PUBLIC USING (true) WITH CHECK (true);
        CREATE POLICY outbox_leases_dispatcher_insert ON outbox_leases
            AS RESTRICTIVE FOR INSERT TO outbox_dispatcher
            WITH CHECK (resource LIKE 'dispatcher/%');
        CREATE POLICY outbox_leases_dispatcher_update ON outbox_leases
            AS RESTRICTIVE FOR UPDATE TO outbox_dispatcher
            USING (resource LIKE 'dispatcher/%') WITH CHECK (resource LIKE 'dispatcher/%');
    END IF;
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION outbox.grant_roles() FROM PUBLIC;
-- The tables it names are this schema's, whoever's search_path it is called under.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION outbox.grant_roles() SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
END
$$;

SELECT outbox.grant_roles();
