-- Issue 36, item 3: what a claim's size costs per delivered op, with the store's own
-- statements (0013/0014 and store/sql/postgres/): the claim function outbox_op_claim_due and
-- op_complete_batch_if_claimed.sql (wrapped by wrap.py). Every op is delivered at its first
-- attempt; each claim of at most `claim` ops is completed in one statement after the next
-- claim (as the dispatcher's recorder does, one batch behind), a commit after each.
INSERT INTO outbox_leases (resource, owner_id, expires_at, fence)
VALUES ('orders', '00000000-0000-0000-0000-000000000001', 'infinity', 1),
       ('dispatcher/0', '00000000-0000-0000-0000-000000000002', 'infinity', 1);
INSERT INTO outbox_destinations (destination) VALUES ('sink');

-- The backlog: `ops` requests with their queue rows, as op_insert_plain_batch.sql writes them
-- (a body of 300 bytes, two headers).
CREATE PROCEDURE bench_fill(ops integer)
LANGUAGE plpgsql AS $$
BEGIN
    WITH request AS (
        INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination,
                                     idempotency_key, request_hash, partition, method, path,
                                     headers, content_type, body)
        SELECT gen_random_uuid(), 'orders', 1, '00000000-0000-0000-0000-000000000001', 'sink',
               'order-' || i, sha256(int4send(i)), i % 1024, 'POST', '/hooks/orders/' || i,
               jsonb_build_array(jsonb_build_array('x-request-id', md5(i::text))),
               'application/json', convert_to(rpad('{"order":' || i || ',"lines":[', 300, 'x'), 'UTF8')
        FROM generate_series(1, ops) AS i
        RETURNING id, partition, destination, fence, order_key, expire_with_generation
    )
    INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation)
    SELECT id, clock_timestamp(), partition, destination, fence, order_key, expire_with_generation
    FROM request;
END
$$;

CREATE PROCEDURE bench_drain(claim integer)
LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
    atts integer[];
    prev_ids bigint[];
    prev_atts integer[];
    n integer;
BEGIN
    LOOP
        SELECT array_agg(c.id), array_agg(c.attempts) INTO ids, atts
        FROM outbox_op_claim_due('dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, 1, 0,
                                 ARRAY['sink'], ARRAY[claim], ARRAY[]::text[], claim, 1048576) c;
        COMMIT;
        IF prev_ids IS NOT NULL THEN
            n := cardinality(prev_ids);
            PERFORM bench_complete(
                'dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, prev_ids,
                array_fill('delivered'::text, ARRAY[n]), array_fill(0::bigint, ARRAY[n]),
                array_fill(NULL::text, ARRAY[n]), prev_atts, array_fill(clock_timestamp(), ARRAY[n]),
                array_fill('delivered'::text, ARRAY[n]), array_fill(204, ARRAY[n]),
                array_fill(NULL::text, ARRAY[n]), array_fill(NULL::text, ARRAY[n]));
            COMMIT;
        END IF;
        EXIT WHEN ids IS NULL;
        prev_ids := ids;
        prev_atts := atts;
    END LOOP;
END
$$;
