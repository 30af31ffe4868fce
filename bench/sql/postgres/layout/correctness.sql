-- A check of the split's claim and completion (c) and of the batch claim (d) on six ops:
-- order keys a (3 ops), b (2), one unordered; applied over c_split.sql and d_batch_claim.sql.
-- Each ASSERT stops the run (psql ON_ERROR_STOP) if the SQL does not do what the note says.
CREATE FUNCTION bench_six_ops() RETURNS void
LANGUAGE sql AS $$
    TRUNCATE outbox_requests, outbox_queue, outbox_attempts, outbox_finished, outbox_claims;
    ALTER TABLE outbox_requests ALTER COLUMN id RESTART WITH 1;
    WITH r AS (
        INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination,
                                     idempotency_key, request_hash, order_key, slot, method,
                                     path, headers, body, expire_with_generation)
        SELECT gen_random_uuid(), 'orders', 1, '00000000-0000-0000-0000-000000000001', 'sink',
               'k' || i, '\x00', k, i, 'POST', '/x', '[]', '\x', false
        FROM (VALUES (1, 'a'), (2, 'a'), (3, 'a'), (4, 'b'), (5, 'b'), (6, NULL)) AS v(i, k)
        ORDER BY i
        RETURNING id, slot, destination, fence, order_key, expire_with_generation
    )
    INSERT INTO outbox_queue (id, due_at, slot, destination, fence, order_key, expire_with_generation)
    SELECT id, clock_timestamp(), slot, destination, fence, order_key, expire_with_generation FROM r;
    UPDATE outbox_destinations SET paused_at = NULL, paused_by = NULL;
$$;

CREATE FUNCTION bench_claim_c() RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT coalesce(array_agg(id ORDER BY id), '{}')
    FROM outbox_queue_claim_due('dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, 1, 0,
                                ARRAY['sink'], ARRAY[128], ARRAY[]::text[], 128, 1048576)
$$;

CREATE FUNCTION bench_claim_d(in_flight bigint[]) RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT coalesce(array_agg(id ORDER BY id), '{}')
    FROM outbox_claims_take_due('dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, 1, 0,
                                ARRAY['sink'], ARRAY[128], ARRAY[]::text[], 128, 1048576, in_flight)
$$;

DO $$
DECLARE
    n integer;
BEGIN
    -- c: the heads of a and b and the unordered op; then nothing while they are in flight.
    PERFORM bench_six_ops();
    ASSERT bench_claim_c() = '{1,4,6}', 'c: first claim';
    ASSERT bench_claim_c() = '{}', 'c: nothing of a key in flight (G8)';
    -- 1 delivered, 4 retried; a completion under another token changes nothing (G9).
    SELECT count(*) INTO n FROM outbox_queue_complete_batch_if_claimed(
        'dispatcher/0', '00000000-0000-0000-0000-000000000002', 0, '{6}', '{delivered}', '{0}',
        '{NULL}', '{1}', ARRAY[now()], '{delivered}', '{200}', '{""}', '{NULL}');
    ASSERT n = 0, 'c: a stale token completes nothing';
    SELECT count(*) INTO n FROM outbox_queue_complete_batch_if_claimed(
        'dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, '{1,4}', '{delivered,pending}',
        '{0,0}', '{NULL,503}', '{1,1}', ARRAY[now(), now()], '{delivered,failed}', '{200,503}',
        '{"",""}', '{NULL,NULL}');
    ASSERT n = 2, 'c: both completions apply';
    ASSERT (SELECT array_agg(state) FROM outbox_finished) = '{delivered}', 'c: one terminal row';
    ASSERT (SELECT count(*) FROM outbox_attempts) = 2, 'c: two attempt rows';
    ASSERT bench_claim_c() = '{2,4}', 'c: the next head of a, the retried head of b';
    ASSERT (SELECT attempts FROM outbox_queue WHERE id = 4) = 2, 'c: the retry counts its attempt';
    -- A paused destination is held.
    UPDATE outbox_queue SET claimed_fence = NULL, claimed_lease = NULL, claimed_at = NULL;
    UPDATE outbox_destinations SET paused_at = now(), paused_by = 'check';
    ASSERT bench_claim_c() = '{}', 'c: a paused destination is held';

    -- d: the same heads, the leader's in-flight ids keep a key's next op back, one row a batch.
    PERFORM bench_six_ops();
    ASSERT bench_claim_d('{}') = '{1,4,6}', 'd: first claim';
    ASSERT bench_claim_d('{1,4,6}') = '{}', 'd: nothing of a key in flight (G8)';
    SELECT count(*) INTO n FROM outbox_claims_complete_batch(
        'dispatcher/0', '00000000-0000-0000-0000-000000000002', 1, '{1}', '{delivered}', '{0}',
        '{NULL}', '{1}', ARRAY[now()], '{delivered}', '{200}', '{""}', '{NULL}');
    ASSERT n = 1, 'd: the completion applies';
    ASSERT bench_claim_d('{4,6}') = '{2}', 'd: the next head of a';
    ASSERT (SELECT count(*) FROM outbox_claims) = 2
       AND (SELECT ids FROM outbox_claims ORDER BY batch LIMIT 1) = '{1,4,6}',
        'd: one claims row per batch, none for an empty claim';
    RAISE NOTICE 'correctness: all checks passed';
END
$$;
