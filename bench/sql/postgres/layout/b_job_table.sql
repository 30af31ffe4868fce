-- Layout b, a floor: a job table without history, in the shape of graphile-worker's (not its
-- schema): the claim marks due rows locked, a HOT update (the claim's index does not cover what
-- it changes), and success deletes the row. No lease, no idempotency key, no attempt rows.
-- Fillfactor 50: at 100 the pages are full of ~600-byte rows when the claims come, and the
-- claim was HOT for 3% of the rows (71 µs and 1,550 B of WAL per delivered op in this loop).
CREATE TABLE jobs (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_name  text        NULL,
    task        text        NOT NULL,
    payload     jsonb       NOT NULL,
    run_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text        NULL,
    locked_at   timestamptz NULL,
    locked_by   text        NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
) WITH (fillfactor = 50);
CREATE INDEX jobs_due_idx ON jobs (run_at, id);

CREATE PROCEDURE bench_enqueue(n integer)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    l0 pg_lsn := pg_current_wal_lsn();
BEGIN
    FOR i IN 1..n LOOP
        INSERT INTO jobs (task, payload)
        VALUES ('deliver', jsonb_build_object('path', '/hooks/orders/' || i,
                                              'headers', bench_headers(i),
                                              'body', convert_from(bench_body(i), 'UTF8')));
        COMMIT;
    END LOOP;
    CALL bench_record('b job table', 'enqueue', n, t0, l0);
END
$$;

CREATE PROCEDURE bench_drain()
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    l0 pg_lsn := pg_current_wal_lsn();
    ids bigint[];
    prev_ids bigint[];
    n integer;
    done integer := 0;
    claims integer := 0;
BEGIN
    LOOP
        WITH j AS (
            SELECT id FROM jobs
            WHERE run_at <= clock_timestamp() AND locked_at IS NULL
            ORDER BY run_at, id
            LIMIT 128
            FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE jobs SET locked_at = clock_timestamp(), locked_by = 'worker-1',
                            attempts = jobs.attempts + 1
            FROM j WHERE jobs.id = j.id
            RETURNING jobs.id, jobs.payload
        )
        SELECT array_agg(id) INTO ids FROM claimed;
        COMMIT;
        claims := claims + 1;
        IF prev_ids IS NOT NULL THEN
            DELETE FROM jobs WHERE id = ANY(prev_ids) AND locked_by = 'worker-1';
            GET DIAGNOSTICS n = ROW_COUNT;
            COMMIT;
            done := done + n;
        END IF;
        EXIT WHEN ids IS NULL;
        prev_ids := ids;
    END LOOP;
    CALL bench_record('b job table', 'delivery', done, t0, l0, claims || ' claims');
END
$$;
