-- 0014_request_rules: the rules a request row must keep (G10, G11: a method the
-- dispatcher sends, a destination's name, a key of 1-255 characters, a slot of 0..1023, a path
-- that names no other host, a body of at most 16 MiB, headers as a JSON array, a trace state of
-- at most 512 bytes) are checked by one row trigger instead of eight CHECK constraints.
--
-- Why (issue 36, BENCHMARKS.md "Enqueue: the request's rules"): PostgreSQL prepares every CHECK
-- expression afresh for each statement that writes the table (it reads the stored expression
-- back from text and simplifies it before the first row), so on a one-op enqueue the eight
-- checks cost more instructions than the rest of the INSERT (263k over the 253k of the same
-- INSERT without them, counted by callgrind: bench/sql/postgres/rules/count.sh). A PL/pgSQL
-- function keeps its compiled expressions for the session: the same rules in this trigger cost
-- 62k. At 100 rows a statement the trigger costs about 4k instructions a row more than the
-- checks did (112k against 108k): enqueues are mostly one op a statement.
--
-- What does not change: the same rows are refused, with the SQLSTATE of a failed CHECK
-- (23514, check_violation) and the old constraint's name in the error's CONSTRAINT field, for
-- INSERT and UPDATE alike; a NULL trace state passes, as it did. The producer (Rust) and the SQL
-- API (outbox.check_op) still validate first and say what is wrong in their own words: this is
-- the table's own line for whatever writes it directly.

CREATE FUNCTION outbox_request_rules() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    broken text;
BEGIN
    -- The common case in one expression; which rule broke is worked out only on failure.
    IF NEW.method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')
       AND NEW.destination ~ '^[a-z0-9_-]{1,64}$'
       AND char_length(NEW.idempotency_key) BETWEEN 1 AND 255
       AND NEW.partition BETWEEN 0 AND 1023
       AND NEW.path ~ '^/[!-~]*$' AND left(NEW.path, 2) <> '//'
       AND octet_length(NEW.path) <= 2048
       AND octet_length(NEW.body) <= 16777216
       AND jsonb_typeof(NEW.headers) = 'array'
       AND (NEW.trace_state IS NULL OR octet_length(NEW.trace_state) <= 512) THEN
        RETURN NEW;
    END IF;
    broken := CASE
        WHEN NOT coalesce(NEW.method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE'), false)
            THEN 'outbox_ops_method'
        WHEN NOT coalesce(NEW.destination ~ '^[a-z0-9_-]{1,64}$', false)
            THEN 'outbox_ops_destination_format'
        WHEN NOT coalesce(char_length(NEW.idempotency_key) BETWEEN 1 AND 255, false)
            THEN 'outbox_ops_key_length'
        WHEN NOT coalesce(NEW.partition BETWEEN 0 AND 1023, false)
            THEN 'outbox_ops_partition_slot'
        WHEN NOT coalesce(NEW.path ~ '^/[!-~]*$' AND left(NEW.path, 2) <> '//'
                          AND octet_length(NEW.path) <= 2048, false)
            THEN 'outbox_ops_path_format'
        WHEN NOT coalesce(octet_length(NEW.body) <= 16777216, false)
            THEN 'outbox_ops_body_size'
        WHEN NOT coalesce(jsonb_typeof(NEW.headers) = 'array', false)
            THEN 'outbox_ops_headers_array'
        ELSE 'outbox_ops_trace_state_length'
    END;
    RAISE EXCEPTION 'new row for relation "%" violates rule "%"', TG_TABLE_NAME, broken
        USING ERRCODE = 'check_violation', CONSTRAINT = broken, TABLE = TG_TABLE_NAME,
              SCHEMA = TG_TABLE_SCHEMA;
END;
$$;

-- Created before the checks go, in the same transaction: no moment without the rules.
CREATE TRIGGER outbox_requests_rules
    BEFORE INSERT OR UPDATE ON outbox_requests
    FOR EACH ROW EXECUTE FUNCTION outbox_request_rules();

ALTER TABLE outbox_requests
    DROP CONSTRAINT outbox_ops_method,
    DROP CONSTRAINT outbox_ops_destination_format,
    DROP CONSTRAINT outbox_ops_key_length,
    DROP CONSTRAINT outbox_ops_partition_slot,
    DROP CONSTRAINT outbox_ops_path_format,
    DROP CONSTRAINT outbox_ops_body_size,
    DROP CONSTRAINT outbox_ops_headers_array,
    DROP CONSTRAINT outbox_ops_trace_state_length;
