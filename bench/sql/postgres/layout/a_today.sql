-- Layout a, today's: run.sh applies migrations/postgres/0001..0012 to a fresh database first.
-- Enqueue is op_insert_new_if_lease_held.sql's statement; the claim calls outbox_op_claim_due
-- (0012) as op_claim_due.sql does; the completion is op_complete_batch_if_claimed.sql's
-- statement with every op delivered. Parameters become PL/pgSQL variables, nothing else.
INSERT INTO outbox_leases (resource, owner_id, expires_at, fence)
VALUES ('orders', '00000000-0000-0000-0000-000000000001', 'infinity', 1),
       ('dispatcher/0', '00000000-0000-0000-0000-000000000002', 'infinity', 1);
INSERT INTO outbox_destinations (destination) VALUES ('sink');

CREATE PROCEDURE bench_enqueue(n integer)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    l0 pg_lsn := pg_current_wal_lsn();
    oid uuid;
BEGIN
    FOR i IN 1..n LOOP
        oid := gen_random_uuid();
        INSERT INTO outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                                request_hash, order_key, partition, method, path, headers,
                                content_type, body, expire_with_generation, next_attempt_at,
                                trace_context, trace_state)
        SELECT oid, 'orders', 1, '00000000-0000-0000-0000-000000000001', 'sink',
               'order-' || i || '-created', sha256(int4send(i)), NULL, i % 1024, 'POST',
               '/hooks/orders/' || i, bench_headers(i), 'application/json', bench_body(i), false,
               clock_timestamp() + 0::bigint * interval '1 millisecond',
               '00-' || md5(i::text) || '-' || left(md5(i::text), 16) || '-01', NULL
        FROM outbox_leases
        WHERE resource = 'orders'
          AND owner_id = '00000000-0000-0000-0000-000000000001'
          AND fence = 1
          AND expires_at > clock_timestamp()
        FOR SHARE;
        COMMIT;
    END LOOP;
    CALL bench_record('a today', 'enqueue', n, t0, l0);
END
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
        FROM outbox_op_claim_due('dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, 1, 0,
                                 ARRAY['sink'], ARRAY[128], ARRAY[]::text[], 128, 1048576) c;
        COMMIT;
        claims := claims + 1;
        IF prev_ids IS NOT NULL THEN
            n := cardinality(prev_ids);
            WITH lease AS (
                SELECT 1 FROM outbox_leases
                WHERE resource = 'dispatcher/0' AND owner_id = '00000000-0000-0000-0000-000000000002'
                  AND fence = 1
                FOR SHARE
            ), c AS (
                SELECT *
                FROM unnest(prev_ids, array_fill('delivered'::text, ARRAY[n]),
                            array_fill(0::bigint, ARRAY[n]), array_fill(NULL::text, ARRAY[n]),
                            prev_atts, array_fill(clock_timestamp(), ARRAY[n]),
                            array_fill('delivered'::text, ARRAY[n]), array_fill(200, ARRAY[n]),
                            array_fill('{"ok":true}'::text, ARRAY[n]), array_fill(NULL::text, ARRAY[n]))
                     AS c(id, state, delay_ms, error, attempt, started_at, outcome, http_status,
                          excerpt, trace)
            ), fin AS (
                UPDATE outbox_ops o
                SET state = c.state,
                    claimed_by_fence = NULL,
                    claimed_by_lease = NULL,
                    claimed_at = NULL,
                    next_attempt_at = CASE WHEN c.state = 'pending'
                                           THEN clock_timestamp() + c.delay_ms * interval '1 millisecond'
                                           ELSE o.next_attempt_at END,
                    delivered_at = CASE WHEN c.state = 'delivered' THEN clock_timestamp() ELSE o.delivered_at END,
                    finished_at = CASE WHEN c.state IN ('delivered', 'dead') THEN clock_timestamp() ELSE NULL END,
                    last_error = c.error,
                    last_attempt_trace = c.trace
                FROM c
                WHERE o.id = c.id
                  AND o.state = 'in_flight'
                  AND o.claimed_by_fence = 1
                  AND o.claimed_by_lease = 'dispatcher/0'
                  AND EXISTS (SELECT 1 FROM lease)
                RETURNING o.id, o.op_id
            ), attempts AS (
                INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at,
                                             outcome, http_status, error, response_excerpt, trace_context)
                SELECT fin.op_id, c.attempt, 1, c.started_at, clock_timestamp(), c.outcome,
                       c.http_status, c.error, c.excerpt, c.trace
                FROM fin JOIN c ON c.id = fin.id
                ON CONFLICT (op_id, attempt) DO NOTHING
            )
            SELECT count(*) INTO n FROM fin;
            COMMIT;
            done := done + n;
        END IF;
        EXIT WHEN ids IS NULL;
        prev_ids := ids;
        prev_atts := atts;
    END LOOP;
    CALL bench_record('a today', 'delivery', done, t0, l0, claims || ' claims');
END
$$;
