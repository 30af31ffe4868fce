-- The cost of the op table's CHECK constraints on enqueue, run over today's migrations: copies
-- of outbox_ops without indexes that differ only in their checks, filled by plain INSERTs of
-- 1 and of 100 rows a statement (a commit each).
--   ck_all:  today's CHECKs, copied from outbox_ops;
--   ck_none: none;
--   ck_one:  the same validation as one CHECK, the expressions joined by AND;
--   ck_func: the same validation as one CHECK calling one IMMUTABLE SQL function.
CREATE TABLE ck_all (LIKE outbox_ops INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS);
CREATE TABLE ck_none (LIKE outbox_ops INCLUDING DEFAULTS INCLUDING IDENTITY);
CREATE TABLE ck_one (LIKE outbox_ops INCLUDING DEFAULTS INCLUDING IDENTITY);
CREATE TABLE ck_func (LIKE outbox_ops INCLUDING DEFAULTS INCLUDING IDENTITY);

SELECT count(*) AS checks_on_outbox_ops
FROM pg_constraint WHERE conrelid = 'outbox_ops'::regclass AND contype = 'c';

-- Today's expressions, written once; the CHECK of ck_one spells them out, ck_func calls this.
CREATE FUNCTION ck_op_is_valid(state text, method text, destination text, idempotency_key text,
                               attempts integer, slot integer, claimed_by_fence bigint,
                               path text, body bytea, headers jsonb, trace_state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state IN ('pending', 'in_flight', 'delivered', 'dead', 'cancelled', 'superseded')
       AND method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')
       AND destination ~ '^[a-z0-9_-]{1,64}$'
       AND char_length(idempotency_key) BETWEEN 1 AND 255
       AND attempts >= 0
       AND slot BETWEEN 0 AND 1023
       AND (state = 'in_flight') = (claimed_by_fence IS NOT NULL)
       AND path ~ '^/[!-~]*$' AND left(path, 2) <> '//' AND octet_length(path) <= 2048
       AND octet_length(body) <= 16777216
       AND jsonb_typeof(headers) = 'array'
       AND coalesce(octet_length(trace_state), 0) <= 512
$$;

ALTER TABLE ck_one ADD CONSTRAINT ck_one_valid CHECK (
    state IN ('pending', 'in_flight', 'delivered', 'dead', 'cancelled', 'superseded')
    AND method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')
    AND destination ~ '^[a-z0-9_-]{1,64}$'
    AND char_length(idempotency_key) BETWEEN 1 AND 255
    AND attempts >= 0
    AND partition BETWEEN 0 AND 1023
    AND (state = 'in_flight') = (claimed_by_fence IS NOT NULL)
    AND path ~ '^/[!-~]*$' AND left(path, 2) <> '//' AND octet_length(path) <= 2048
    AND octet_length(body) <= 16777216
    AND jsonb_typeof(headers) = 'array'
    AND coalesce(octet_length(trace_state), 0) <= 512);
ALTER TABLE ck_func ADD CONSTRAINT ck_func_valid CHECK (
    ck_op_is_valid(state, method, destination, idempotency_key, attempts, partition,
                   claimed_by_fence, path, body, headers, trace_state));

-- One procedure per table so each INSERT is a static statement with a cached plan.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['ck_all', 'ck_none', 'ck_one', 'ck_func'] LOOP
        EXECUTE format($f$
            CREATE PROCEDURE fill_%1$s(rows integer, statements integer)
            LANGUAGE plpgsql AS $p$
            DECLARE
                t0 timestamptz;
                l0 pg_lsn;
            BEGIN
                t0 := clock_timestamp();
                l0 := pg_current_wal_lsn();
                FOR s IN 1..statements LOOP
                    INSERT INTO %1$I (op_id, resource, fence, owner_id, destination,
                                      idempotency_key, request_hash, partition, method, path,
                                      headers, content_type, body, trace_context)
                    SELECT gen_random_uuid(), 'orders', 1, '00000000-0000-0000-0000-000000000001',
                           'sink', 'order-' || s || '-' || i, sha256(int4send(i)), i %% 1024,
                           'POST', '/hooks/orders/' || i, bench_headers(i), 'application/json',
                           bench_body(i), '00-' || md5(i::text) || '-' || left(md5(i::text), 16) || '-01'
                    FROM generate_series(1, rows) AS i;
                    COMMIT;
                END LOOP;
                CALL bench_record(%1$L, rows || ' row(s) a statement', rows * statements, t0, l0);
            END
            $p$;
        $f$, t);
    END LOOP;
END
$$;

-- Interleaved, twice: 20,000 one-row statements and 500 statements of 100 rows per table.
CALL fill_ck_all(1, 20000);
CALL fill_ck_none(1, 20000);
CALL fill_ck_one(1, 20000);
CALL fill_ck_func(1, 20000);
CALL fill_ck_all(100, 500);
CALL fill_ck_none(100, 500);
CALL fill_ck_one(100, 500);
CALL fill_ck_func(100, 500);
CALL fill_ck_all(1, 20000);
CALL fill_ck_none(1, 20000);
CALL fill_ck_one(1, 20000);
CALL fill_ck_func(1, 20000);
CALL fill_ck_all(100, 500);
CALL fill_ck_none(100, 500);
CALL fill_ck_one(100, 500);
CALL fill_ck_func(100, 500);

\pset footer off
SELECT layout AS "table", phase, ops, round(micros / ops, 2) AS us_per_row,
       round(wal_bytes / ops) AS wal_b_per_row
FROM bench_result ORDER BY phase, layout, at;
