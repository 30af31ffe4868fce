-- Layout e, a floor: PgQ 3.5 (Debian's postgresql-15-pgq3). An event is appended to the
-- queue's current event table; a consumer reads the events between two ticks as one batch and
-- finishes it. No lease check, no idempotency, no attempts or outcomes, no per-event state at
-- all. There is no ticker daemon here: the enqueue loop ticks after every 128 events (the tick
-- is counted in the enqueue), so each batch holds 128 events like the other layouts' claims.
-- The drain is next_batch, get_batch_events, finish_batch, a commit after each; nothing is in
-- flight between batches. Table rotation (PgQ's retention) is not run.
CREATE EXTENSION pgq;
SELECT pgq.create_queue('ops');
SELECT pgq.set_queue_config('ops', 'ticker_max_count', '128');
SELECT pgq.register_consumer('ops', 'dispatcher');

CREATE PROCEDURE bench_enqueue(n integer)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    l0 pg_lsn := pg_current_wal_lsn();
BEGIN
    FOR i IN 1..n LOOP
        PERFORM pgq.insert_event('ops', 'deliver',
                                 jsonb_build_object('path', '/hooks/orders/' || i,
                                                    'headers', bench_headers(i),
                                                    'body', convert_from(bench_body(i), 'UTF8'))::text);
        COMMIT;
        IF i % 128 = 0 OR i = n THEN
            IF i = n THEN
                PERFORM pgq.force_tick('ops');
            END IF;
            PERFORM pgq.ticker('ops');
            COMMIT;
        END IF;
    END LOOP;
    CALL bench_record('e pgq', 'enqueue', n, t0, l0);
END
$$;

CREATE PROCEDURE bench_drain()
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    l0 pg_lsn := pg_current_wal_lsn();
    batch bigint;
    n integer;
    done integer := 0;
    batches integer := 0;
BEGIN
    LOOP
        batch := pgq.next_batch('ops', 'dispatcher');
        COMMIT;
        EXIT WHEN batch IS NULL;
        SELECT count(*) INTO n FROM pgq.get_batch_events(batch);
        COMMIT;
        PERFORM pgq.finish_batch(batch);
        COMMIT;
        done := done + n;
        batches := batches + 1;
    END LOOP;
    CALL bench_record('e pgq', 'delivery', done, t0, l0, batches || ' batches');
END
$$;
