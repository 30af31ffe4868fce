-- Shared by every layout of the issue 36 prototype: the results table and the values one op is
-- made of (a 300-byte body, an op of about 708 bytes in today's table), so each layout writes
-- the same data. STABLE, not IMMUTABLE: their bodies call STABLE functions (convert_to,
-- jsonb_build_array), and only then does the planner inline them (about 30 µs a call if not).
CREATE TABLE bench_result (
    layout      text        NOT NULL,
    phase       text        NOT NULL,
    ops         integer     NOT NULL,
    micros      numeric     NOT NULL,
    wal_bytes   numeric     NOT NULL,
    note        text        NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION bench_body(i integer) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT convert_to(rpad('{"order":' || i || ',"lines":[', 300, 'x'), 'UTF8')
$$;

CREATE FUNCTION bench_headers(i integer) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_array(jsonb_build_array('x-request-id', md5(i::text)),
                             jsonb_build_array('x-tenant', 'tenant-' || (i % 97)))
$$;

-- Record one measured phase: WAL from the LSN taken before it, time from its start.
CREATE PROCEDURE bench_record(layout text, phase text, ops integer, started timestamptz,
                              lsn0 pg_lsn, note text DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_result (layout, phase, ops, micros, wal_bytes, note)
    VALUES (layout, phase, ops,
            extract(epoch FROM clock_timestamp() - started) * 1e6,
            pg_current_wal_lsn() - lsn0, note);
END
$$;
