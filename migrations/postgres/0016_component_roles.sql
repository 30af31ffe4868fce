-- Least privilege for the outbox's own components (issue 37): a role each for the dispatcher,
-- the operator (outboxctl's changes) and the viewer (status, list, show, the console), beside
-- 0015's outbox_producer. Each holds the rights its statements need and no more:
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

-- 2. Grants to the three roles (and 0015's), their creation when missing and allowed, and the
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
