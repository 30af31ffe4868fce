-- 0004_sql_api: the producer contract as SQL functions in the schema `outbox`, for workers in any
-- language: outbox.try_acquire, outbox.renew, outbox.release and outbox.enqueue. They run on
-- the database clock (G2) and enforce what the Rust producer enforces: the same token rules
-- (G1, G3), the same fenced insert (G4: the lease row is share-locked by the insert itself, so
-- the op commits or rolls back with the caller's transaction and no takeover commits in
-- between), the same idempotency rules (G7) and the same input rules as Operation's builder
-- (G10), checked against one shared table (tests/cases/enqueue_validation.json).
--
-- Errors are SQLSTATEs of class OB ("outbox"), each with a JSON DETAIL a caller can act on:
--   OB001 stale: a newer owner holds the resource; DETAIL has current_token.
--   OB002 expired: this owner and token, but the lease expired by the database clock.
--   OB003 no lease: never leased, or released; DETAIL has current_token when known.
--   OB004 idempotency conflict: the key holds another request; DETAIL has existing_op_id.
--   OB005 invalid input: nothing was written; COLUMN and DETAIL name the field.
-- A rejected enqueue (OB001-OB003) is kept in outbox_rejections like the Rust path keeps it,
-- and that record must survive the caller's rollback: it is written by an autonomous
-- transaction, a dblink loopback connection (see outbox.keep_rejection).
--
-- Settings (optional, e.g. ALTER DATABASE … SET outbox.lease_max_ttl = '10 min'):
--   outbox.lease_min_ttl, outbox.lease_max_ttl  lease TTL bounds, default 5 s and 300 s (as the
--                                               Rust StoreOptions), within 1 ms..1 day;
--   outbox.max_body_bytes                       body limit, default 1 MiB, at most 16 MiB.

CREATE SCHEMA outbox;

-- dblink ships with PostgreSQL (contrib). Creating it needs a privileged role; without it the
-- functions still work, and a rejection is then reported as a WARNING instead of kept. It goes
-- in a schema of its own that callers cannot use: only outbox.keep_rejection (run with its
-- owner's rights) opens connections, and the API schema holds the API alone.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'dblink') THEN
        BEGIN
            CREATE SCHEMA outbox_dblink;
            REVOKE ALL ON SCHEMA outbox_dblink FROM PUBLIC;
            CREATE EXTENSION dblink WITH SCHEMA outbox_dblink;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'fenced-outbox: dblink is not available (%): rejected SQL enqueues will be reported, not kept', SQLERRM;
        END;
    END IF;
END
$$;

-- Raises OB005 for `field`: the one shape of every refused input.
CREATE FUNCTION outbox.refuse(field text, reason text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'OB005',
        MESSAGE = format('invalid %s: %s', field, reason),
        COLUMN = field,
        DETAIL = json_build_object('field', field, 'reason', reason)::text;
END
$$;

-- A resource name (ResourceName::new): 1..=200 characters, no control character, and not a
-- dispatcher partition lease (those are outbox-dispatcher's, G9).
CREATE FUNCTION outbox.check_resource(resource text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF resource IS NULL OR resource = '' THEN
        PERFORM outbox.refuse('resource', 'must not be empty');
    ELSIF char_length(resource) > 200 THEN
        PERFORM outbox.refuse('resource', format('is %s characters long, the limit is 200', char_length(resource)));
    ELSIF resource ~ '[\x01-\x1f\x7f-\x9f]' THEN
        PERFORM outbox.refuse('resource', 'contains a control character');
    ELSIF starts_with(resource, 'dispatcher/') THEN
        PERFORM outbox.refuse('resource', 'is a dispatcher partition lease: only outbox-dispatcher takes those');
    END IF;
END
$$;

-- The owner id and token a caller presents for a lease: both are required.
CREATE FUNCTION outbox.check_owner(owner_id uuid, token bigint) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF owner_id IS NULL THEN
        PERFORM outbox.refuse('owner_id', 'is required (the owner id try_acquire returned)');
    ELSIF token IS NULL THEN
        PERFORM outbox.refuse('token', 'is required (the token try_acquire returned)');
    END IF;
END
$$;

-- An interval setting, or its default when unset; a value that is not an interval is refused.
-- The exception block (a subtransaction) is entered only when the setting is set.
CREATE FUNCTION outbox.setting_interval(name text, fallback interval) RETURNS interval
LANGUAGE plpgsql STABLE AS $$
DECLARE
    raw text := nullif(current_setting(name, true), '');
BEGIN
    IF raw IS NULL THEN
        RETURN fallback;
    END IF;
    BEGIN
        RETURN raw::interval;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        PERFORM outbox.refuse(name, 'is not an interval');
    END;
    RETURN NULL;
END
$$;

-- A lease time to live in whole milliseconds, within the bounds (TtlBounds::check).
CREATE FUNCTION outbox.ttl_ms(ttl interval) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    lo interval := outbox.setting_interval('outbox.lease_min_ttl', interval '5 seconds');
    hi interval := outbox.setting_interval('outbox.lease_max_ttl', interval '300 seconds');
    secs numeric;
BEGIN
    IF extract(epoch FROM lo) < 0.001 THEN
        PERFORM outbox.refuse('outbox.lease_min_ttl', 'must be at least 1ms');
    ELSIF extract(epoch FROM hi) > 86400 THEN
        PERFORM outbox.refuse('outbox.lease_max_ttl', 'must be at most 1 day');
    ELSIF extract(epoch FROM lo) > extract(epoch FROM hi) THEN
        PERFORM outbox.refuse('outbox.lease_min_ttl', 'is above outbox.lease_max_ttl');
    END IF;
    IF ttl IS NULL THEN
        PERFORM outbox.refuse('ttl', 'is required');
    END IF;
    secs := extract(epoch FROM ttl);
    IF secs < extract(epoch FROM lo) OR secs > extract(epoch FROM hi) THEN
        PERFORM outbox.refuse('ttl', format('%s is outside the allowed %s..=%s', ttl, lo, hi));
    ELSIF secs * 1000 <> trunc(secs * 1000) THEN
        PERFORM outbox.refuse('ttl', format('%s is finer than a millisecond', ttl));
    END IF;
    RETURN (secs * 1000)::bigint;
END
$$;

-- A header value or content type (check_header_value): at most 8192 bytes, visible ASCII,
-- spaces and tabs. The reason never quotes the value: it may be sensitive.
CREATE FUNCTION outbox.check_header_value(field text, value text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF octet_length(value) > 8192 THEN
        PERFORM outbox.refuse(field, format('is %s bytes, the limit is 8192', octet_length(value)));
    ELSIF strpos(value, chr(13)) > 0 OR strpos(value, chr(10)) > 0 THEN
        PERFORM outbox.refuse(field, 'contains CR or LF');
    ELSIF value !~ '^[ \t!-~]*$' THEN
        PERFORM outbox.refuse(field, 'may hold only visible ASCII, spaces and tabs');
    END IF;
END
$$;

-- The headers (check_headers): a JSON array of at most 64 [name, value] string pairs; each name
-- a token of 1..=128 characters that the dispatcher does not set itself and that is not a
-- credential, each value safe to send.
CREATE FUNCTION outbox.check_headers(headers jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    pair jsonb;
    name text;
    lower_name text;
BEGIN
    IF jsonb_typeof(headers) IS DISTINCT FROM 'array' THEN
        PERFORM outbox.refuse('headers', 'must be a JSON array of [name, value] pairs');
    END IF;
    IF jsonb_array_length(headers) > 64 THEN
        PERFORM outbox.refuse('headers', format('%s headers, the limit is 64', jsonb_array_length(headers)));
    END IF;
    FOR pair IN SELECT h FROM jsonb_array_elements(headers) AS t (h) LOOP
        IF jsonb_typeof(pair) IS DISTINCT FROM 'array' OR jsonb_array_length(pair) <> 2
           OR jsonb_typeof(pair -> 0) <> 'string' OR jsonb_typeof(pair -> 1) <> 'string' THEN
            PERFORM outbox.refuse('headers', 'each header must be a [name, value] pair of strings');
        END IF;
        name := pair ->> 0;
        lower_name := lower(name);
        IF name !~ '^[A-Za-z0-9!#$%&''*+.^_`|~-]{1,128}$' THEN
            PERFORM outbox.refuse('header_name', 'is not a valid header name (1..=128 token characters)');
        ELSIF lower_name = 'host' THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: the dispatcher sends to the destination''s configured base URL', name));
        ELSIF lower_name IN ('content-length', 'transfer-encoding') THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: the dispatcher frames the body itself', name));
        ELSIF lower_name IN ('connection', 'keep-alive', 'upgrade', 'te', 'trailer') THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: connection management is the dispatcher''s', name));
        ELSIF lower_name = 'idempotency-key' THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: the dispatcher sends the op''s idempotency key on every attempt', name));
        ELSIF lower_name = 'x-fencing-token' THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: the dispatcher sends the op''s fencing token', name));
        ELSIF lower_name IN ('traceparent', 'tracestate') THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: pass the trace context as traceparent', name));
        ELSIF lower_name = 'content-type' THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: pass it as content_type', name));
        ELSIF lower_name IN ('authorization', 'proxy-authorization') THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: credentials belong in the dispatcher''s destination config, never in op rows', name));
        ELSIF starts_with(lower_name, 'x-outbox-') THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: X-Outbox-* headers are the dispatcher''s', name));
        ELSIF starts_with(lower_name, 'webhook-') THEN
            PERFORM outbox.refuse('header_name', format('%s is reserved: webhook-* headers are the dispatcher''s Standard Webhooks signature', name));
        END IF;
        PERFORM outbox.check_header_value('header_value', pair ->> 1);
    END LOOP;
END
$$;

-- A path below the destination's base URL (check_path): one leading /, visible ASCII, at most
-- 2048 bytes, no \ or #, no .. segment (also percent-encoded) before the query.
CREATE FUNCTION outbox.check_path(path text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF path IS NULL OR NOT starts_with(path, '/') THEN
        PERFORM outbox.refuse('path', 'must start with / (a path below the destination''s base URL, not a URL)');
    ELSIF starts_with(path, '//') THEN
        PERFORM outbox.refuse('path', 'must not start with // (that names a host)');
    ELSIF octet_length(path) > 2048 THEN
        PERFORM outbox.refuse('path', format('is %s bytes long, the limit is 2048', octet_length(path)));
    ELSIF path !~ '^[!-~]*$' THEN
        PERFORM outbox.refuse('path', 'contains a space, control or non-ASCII character: percent-encode it');
    ELSIF strpos(path, '\') > 0 OR strpos(path, '#') > 0 THEN
        PERFORM outbox.refuse('path', 'contains \ or #, which destinations read differently');
    ELSIF EXISTS (SELECT 1
                  FROM unnest(string_to_array(split_part(path, '?', 1), '/')) AS s (segment)
                  WHERE replace(lower(segment), '%2e', '.') = '..') THEN
        PERFORM outbox.refuse('path', 'must not contain a .. segment');
    END IF;
END
$$;

-- Every input of an op, as Operation's builder checks them, in the builder's order.
CREATE FUNCTION outbox.check_op(destination text, method text, path text, headers jsonb,
                                body bytea, content_type text, idempotency_key text,
                                order_key text, unordered boolean, not_before interval,
                                traceparent text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    raw_limit text := nullif(current_setting('outbox.max_body_bytes', true), '');
    body_limit bigint := 1048576;
BEGIN
    IF destination IS NULL OR destination !~ '^[a-z0-9_-]{1,64}$' THEN
        PERFORM outbox.refuse('destination', 'must be 1..=64 of a-z, 0-9, _ and -: it names a configured destination, not a host');
    END IF;
    IF method IS NULL OR method !~ '^[A-Za-z]+$' OR upper(method) NOT IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE') THEN
        PERFORM outbox.refuse('method', 'is not one of GET, POST, PUT, PATCH, DELETE');
    END IF;
    PERFORM outbox.check_path(path);
    PERFORM outbox.check_headers(headers);
    IF content_type IS NOT NULL THEN
        PERFORM outbox.check_header_value('content_type', content_type);
        IF btrim(content_type, E' \t') = '' THEN
            PERFORM outbox.refuse('content_type', 'must not be empty');
        END IF;
    END IF;
    IF idempotency_key IS NULL THEN
        PERFORM outbox.refuse('idempotency_key', 'is required');
    ELSIF octet_length(idempotency_key) NOT BETWEEN 1 AND 255 THEN
        PERFORM outbox.refuse('idempotency_key', format('must be 1..=255 characters, got %s', octet_length(idempotency_key)));
    ELSIF idempotency_key !~ '^[!-~]+$' THEN
        PERFORM outbox.refuse('idempotency_key', 'may hold only visible ASCII characters');
    END IF;
    IF order_key IS NOT NULL THEN
        IF coalesce(unordered, false) THEN
            PERFORM outbox.refuse('order_key', 'cannot be combined with unordered');
        ELSIF char_length(order_key) NOT BETWEEN 1 AND 255 THEN
            PERFORM outbox.refuse('order_key', format('must be 1..=255 characters, got %s', char_length(order_key)));
        ELSIF order_key ~ '[\x01-\x1f\x7f-\x9f]' THEN
            PERFORM outbox.refuse('order_key', 'contains a control character');
        END IF;
    END IF;
    IF extract(epoch FROM not_before) < 0 THEN
        PERFORM outbox.refuse('not_before', 'must not be negative');
    ELSIF extract(epoch FROM not_before) > 31536000 THEN
        PERFORM outbox.refuse('not_before', format('%s is beyond the limit of 365 days', not_before));
    END IF;
    IF traceparent IS NOT NULL
       AND (traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            OR substr(traceparent, 4, 32) = repeat('0', 32)
            OR substr(traceparent, 37, 16) = repeat('0', 16)) THEN
        PERFORM outbox.refuse('traceparent', 'must be 00-<32 hex>-<16 hex>-<2 hex> with non-zero ids');
    END IF;
    IF raw_limit IS NOT NULL THEN
        IF raw_limit !~ '^[0-9]{1,9}$' OR raw_limit::bigint NOT BETWEEN 1 AND 16777216 THEN
            PERFORM outbox.refuse('outbox.max_body_bytes', 'must be 1..=16777216 bytes (16 MiB)');
        END IF;
        body_limit := raw_limit::bigint;
    END IF;
    IF octet_length(body) > body_limit THEN
        PERFORM outbox.refuse('body', format('is %s bytes, the limit is %s', octet_length(body), body_limit));
    END IF;
END
$$;

-- Whether every input of an enqueue is certainly valid, as one boolean expression: true only
-- if check_resource, check_owner and check_op would all pass. It is conservative, not exact:
-- a header value over 128 characters is answered false, though values of up to 8192 bytes are
-- allowed. enqueue runs the detailed checks, which name the field and the reason and alone
-- decide, only when this is not true, so the common case costs one expression instead of a
-- dozen PL/pgSQL calls. A SQL function of one expression (no subquery), so that PostgreSQL
-- inlines it into the caller's. Lengths are compared as numbers, not as regex bounds: on
-- PostgreSQL 15 '^[!-~]{1,255}$' takes 24 µs on a 38-character key, '^[!-~]+$' 0.3 µs.
-- Keep it in step with the checks above: tests/it/sql_api/postgres.rs compares the two on
-- every case of the shared table and on edge cases of each rule.
CREATE FUNCTION outbox.op_is_valid(resource text, owner_id uuid, token bigint,
                                   destination text, method text, path text, headers jsonb,
                                   body bytea, content_type text, idempotency_key text,
                                   order_key text, unordered boolean, not_before interval,
                                   traceparent text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN resource <> '' AND char_length(resource) <= 200
    AND resource !~ '[\x01-\x1f\x7f-\x9f]' AND NOT starts_with(resource, 'dispatcher/')
    AND owner_id IS NOT NULL AND token IS NOT NULL
    AND destination ~ '^[a-z0-9_-]+$' AND octet_length(destination) <= 64
    AND method ~ '^[A-Za-z]+$' AND upper(method) IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')
    AND path ~ '^/[!-~]*$' AND NOT starts_with(path, '//') AND octet_length(path) <= 2048
    AND strpos(path, '\') = 0 AND strpos(path, '#') = 0
    -- no segment of exactly two dots, each possibly %2e: what check_path's replace() finds
    AND split_part(path, '?', 1) !~ '/(\.|%2[eE]){2}(/|$)'
    -- headers: an array of at most 64 [name, value] string pairs, each name a token, each
    -- value visible ASCII, spaces and tabs; no lower-cased name reserved (compared as strings:
    -- one regex alternating the reserved names costs 6 µs); every string at most 128
    -- characters (certain when the whole JSON text is that short)
    AND CASE
        WHEN jsonb_typeof(headers) IS DISTINCT FROM 'array' THEN false
        WHEN jsonb_array_length(headers) > 64 THEN false
        ELSE NOT jsonb_path_exists(headers,
                 'strict $[*] ? (@.type() != "array" || @.size() != 2
                                 || @[0].type() != "string" || @[1].type() != "string"
                                 || !(@[0] like_regex "^[A-Za-z0-9!#$%&''*+.^_`|~-]+$")
                                 || !(@[1] like_regex "^[ \t!-~]*$"))',
                 '{}', true)
             AND NOT (lower(jsonb_path_query_array(headers, 'strict $[*][0]', '{}', true)::text)::jsonb
                      @? '$[*] ? (@ == "host" || @ == "content-length" || @ == "transfer-encoding"
                                  || @ == "connection" || @ == "keep-alive" || @ == "upgrade"
                                  || @ == "te" || @ == "trailer" || @ == "idempotency-key"
                                  || @ == "x-fencing-token" || @ == "traceparent"
                                  || @ == "tracestate" || @ == "content-type"
                                  || @ == "authorization" || @ == "proxy-authorization"
                                  || @ starts with "x-outbox-" || @ starts with "webhook-")')
             AND (octet_length(headers::text) <= 128
                  OR NOT jsonb_path_exists(headers, 'strict $[*][*] ? (@ like_regex "^.{129}")',
                                           '{}', true))
    END
    AND (content_type IS NULL
         OR (octet_length(content_type) <= 8192 AND content_type ~ '^[ \t]*[!-~][ \t!-~]*$'))
    AND idempotency_key ~ '^[!-~]+$' AND octet_length(idempotency_key) <= 255
    AND (order_key IS NULL
         OR (NOT coalesce(unordered, false) AND char_length(order_key) BETWEEN 1 AND 255
             AND order_key !~ '[\x01-\x1f\x7f-\x9f]'))
    AND extract(epoch FROM not_before) BETWEEN 0 AND 31536000
    -- traceparent: 00-<32 hex>-<16 hex>-<2 hex>, told by its length and where its dashes are
    AND (traceparent IS NULL
         OR (octet_length(traceparent) = 55 AND traceparent ~ '^00-[0-9a-f]+-[0-9a-f]+-[0-9a-f]+$'
             AND substr(traceparent, 36, 1) = '-' AND substr(traceparent, 53, 1) = '-'
             AND substr(traceparent, 4, 32) <> repeat('0', 32)
             AND substr(traceparent, 37, 16) <> repeat('0', 16)))
    -- the body limit; a setting that is not a valid limit makes this false (check_op names it)
    AND octet_length(body) <= CASE
        WHEN nullif(current_setting('outbox.max_body_bytes', true), '') IS NULL THEN 1048576
        WHEN current_setting('outbox.max_body_bytes', true) !~ '^[0-9]+$'
             OR octet_length(current_setting('outbox.max_body_bytes', true)) > 9 THEN -1
        WHEN current_setting('outbox.max_body_bytes', true)::bigint BETWEEN 1 AND 16777216
            THEN current_setting('outbox.max_body_bytes', true)::bigint
        ELSE -1
    END;

-- One length-prefixed part of the request hash: the length as 8 bytes big-endian, then the bytes.
CREATE FUNCTION outbox.hash_part(bytes bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN int8send(octet_length(bytes)::bigint) || bytes;

-- SHA-256 over method, path, header count, each header's name and value, content type (or '')
-- and body, each part length-prefixed: Operation::request_hash byte for byte, so a Rust and a
-- SQL producer agree on "the same request" for an idempotency key (G7). NULL when the method,
-- path or headers are. PL/pgSQL walking the array by index: each step is a simple expression,
-- where a SQL function aggregating jsonb_array_elements is not inlined and PostgreSQL 15
-- parses and plans its body again in every statement that calls it (~140 µs an enqueue).
CREATE FUNCTION outbox.request_hash(method text, path text, headers jsonb, content_type text,
                                    body bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    parts bytea := outbox.hash_part(convert_to(method, 'UTF8'))
                   || outbox.hash_part(convert_to(path, 'UTF8'))
                   || outbox.hash_part(int8send(jsonb_array_length(headers)::bigint));
BEGIN
    IF parts IS NULL THEN
        RETURN NULL;
    END IF;
    FOR i IN 0 .. jsonb_array_length(headers) - 1 LOOP
        parts := parts || outbox.hash_part(convert_to(headers -> i ->> 0, 'UTF8'))
                       || outbox.hash_part(convert_to(headers -> i ->> 1, 'UTF8'));
    END LOOP;
    RETURN sha256(parts
                  || outbox.hash_part(convert_to(coalesce(content_type, ''), 'UTF8'))
                  || outbox.hash_part(coalesce(body, ''::bytea)));
END
$$;

-- The partition slot (op::partition_slot): FNV-1a of the order key's UTF-8 bytes, or of the op
-- id's 16 bytes when unordered, modulo 1024. Same key, same slot, same partition (G8).
CREATE FUNCTION outbox.partition_slot(order_key text, op_id uuid) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    bytes bytea := CASE WHEN order_key IS NULL THEN uuid_send(op_id) ELSE convert_to(order_key, 'UTF8') END;
    h bigint := 2166136261;
BEGIN
    FOR i IN 0 .. octet_length(bytes) - 1 LOOP
        h := ((h # get_byte(bytes, i)) * 16777619) & 4294967295;
    END LOOP;
    RETURN (h % 1024)::integer;
END
$$;

-- A time-ordered op id (UUID version 7), as the Rust producer makes them: new ops sit at the
-- right edge of the op_id index.
CREATE FUNCTION outbox.new_op_id() RETURNS uuid
LANGUAGE sql VOLATILE
RETURN encode(set_bit(set_bit(
           overlay(uuid_send(gen_random_uuid())
                   PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                   FROM 1 FOR 6),
           52, 1), 53, 1), 'hex')::uuid;

-- The remote half of keeping a rejection: run on the loopback connection, in its own
-- transaction, so it commits whatever the caller's transaction does.
CREATE PROCEDURE outbox.rejection_insert(payload jsonb)
LANGUAGE sql
BEGIN ATOMIC
    INSERT INTO outbox_rejections (resource, owner_id, fence, current_fence, destination,
                                   idempotency_key, stage, reason)
    VALUES (payload ->> 'resource', (payload ->> 'owner_id')::uuid, (payload ->> 'token')::bigint,
            (payload ->> 'current_token')::bigint, payload ->> 'destination',
            payload ->> 'idempotency_key', payload ->> 'stage', payload ->> 'reason');
END;

-- A libpq connection-string value, quoted.
CREATE FUNCTION outbox.conninfo_quote(value text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT
RETURN '''' || replace(replace(value, '\', '\\'), '''', '\''') || '''';

-- Where the loopback connection goes: the foreign server `outbox_loopback` when an operator made
-- one (CREATE SERVER outbox_loopback FOREIGN DATA WRAPPER dblink_fdw …, with a USER MAPPING
-- holding the password, for a function owner that is not a superuser or for password-only
-- authentication); otherwise this database over the server's own socket (or the address the
-- caller came in on) as the function's owner, which a superuser owner may do without a password.
CREATE FUNCTION outbox.rejection_connection() RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    socket_dir text := nullif(btrim(split_part(current_setting('unix_socket_directories'), ',', 1)), '');
BEGIN
    IF EXISTS (SELECT 1 FROM pg_foreign_server WHERE srvname = 'outbox_loopback') THEN
        RETURN 'outbox_loopback';
    END IF;
    RETURN format('dbname=%s host=%s port=%s user=%s application_name=outbox-rejection connect_timeout=5',
                  outbox.conninfo_quote(current_database()),
                  outbox.conninfo_quote(coalesce(socket_dir, host(inet_server_addr()), '127.0.0.1')),
                  current_setting('port'),
                  outbox.conninfo_quote(current_user));
END
$$;

-- Keeps a rejected enqueue for operators (G4) in an autonomous transaction: the caller's
-- transaction is about to fail with the rejection and will be rolled back, and the record must
-- outlive it, as the Rust path's record (written on another pooled connection) does. dblink
-- runs the insert on a loopback connection and commits it there. The record carries no body or
-- header values. Owned by the migrating role and run with its rights (SECURITY DEFINER), so
-- callers need no dblink rights of their own. Without dblink, or when the loopback fails, the
-- rejection is reported as a WARNING (client and server log) and the caller still gets its error.
CREATE FUNCTION outbox.keep_rejection(payload jsonb) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    dblink_schema text;
BEGIN
    SELECT n.nspname INTO dblink_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'dblink';
    IF dblink_schema IS NULL THEN
        RAISE WARNING 'fenced-outbox: % rejected enqueue not kept: dblink is not installed', payload ->> 'reason';
        RETURN false;
    END IF;
    EXECUTE format('SELECT %I.dblink_exec($1, $2)', dblink_schema)
        USING outbox.rejection_connection(),
              format('CALL outbox.rejection_insert(%L::jsonb)', payload::text);
    RETURN true;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'fenced-outbox: % rejected enqueue not kept: %', payload ->> 'reason', SQLERRM;
    RETURN false;
END
$$;

-- Keeps the rejection, then fails the enqueue with the reason's SQLSTATE.
CREATE FUNCTION outbox.reject(reason text, resource text, owner_id uuid, token bigint,
                              current_token bigint, destination text, idempotency_key text)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    detail jsonb := jsonb_build_object('reason', reason, 'resource', resource,
                                       'owner_id', owner_id, 'token', token,
                                       'current_token', current_token);
BEGIN
    PERFORM outbox.keep_rejection(detail || jsonb_build_object(
        'destination', destination, 'idempotency_key', idempotency_key, 'stage', 'sql_enqueue'));
    IF reason = 'stale' THEN
        RAISE EXCEPTION USING ERRCODE = 'OB001', DETAIL = detail::text,
            MESSAGE = format('stale fencing token %s for %s: the resource''s current token is %s', token, resource, current_token),
            HINT = 'a newer owner holds the resource; nothing was written. Stop this work: do not retry with this token.';
    ELSIF reason = 'expired' THEN
        RAISE EXCEPTION USING ERRCODE = 'OB002', DETAIL = detail::text,
            MESSAGE = format('the lease on %s with token %s expired by the database clock before the enqueue', resource, token),
            HINT = 'nothing was written. Reacquire (a new token) and restart the work from a defined boundary.';
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'OB003', DETAIL = detail::text,
            MESSAGE = format('no lease is held on %s by this owner and token', resource),
            HINT = 'nothing was written. Acquire the resource with outbox.try_acquire first.';
    END IF;
END
$$;

-- try_acquire(resource, ttl): the lease when the resource is free, released or expired by the
-- database clock, with a fresh owner id and a token larger than any before (G1, G2); no row
-- when another owner holds it. Run it as its own statement (autocommit), not inside the
-- business transaction: the lease is only taken once it commits.
CREATE FUNCTION outbox.try_acquire(resource text, ttl interval)
RETURNS TABLE (owner_id uuid, token bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_resource text := try_acquire.resource;
    v_owner uuid := gen_random_uuid();
    v_ttl_ms bigint;
BEGIN
    PERFORM outbox.check_resource(v_resource);
    v_ttl_ms := outbox.ttl_ms(try_acquire.ttl);
    RETURN QUERY
    INSERT INTO outbox_leases AS l (resource, owner_id, expires_at, fence)
    VALUES (v_resource, v_owner, clock_timestamp() + v_ttl_ms * interval '1 millisecond', 1)
    ON CONFLICT (resource) DO UPDATE
        SET owner_id = EXCLUDED.owner_id,
            expires_at = clock_timestamp() + v_ttl_ms * interval '1 millisecond',
            fence = l.fence + 1
        WHERE l.owner_id IS NULL OR l.expires_at <= clock_timestamp()
    RETURNING l.owner_id, l.fence, l.expires_at;
END
$$;

-- renew(resource, owner_id, token, ttl): the new expiry, keeping the token; NULL when the lease
-- is lost, expired (even if nobody took it) or held by a newer owner (G3).
CREATE FUNCTION outbox.renew(resource text, owner_id uuid, token bigint, ttl interval)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_resource text := renew.resource;
    v_owner uuid := renew.owner_id;
    v_token bigint := renew.token;
    v_ttl_ms bigint;
    v_expires timestamptz;
BEGIN
    PERFORM outbox.check_resource(v_resource);
    PERFORM outbox.check_owner(v_owner, v_token);
    v_ttl_ms := outbox.ttl_ms(renew.ttl);
    UPDATE outbox_leases
    SET expires_at = clock_timestamp() + v_ttl_ms * interval '1 millisecond'
    WHERE resource = v_resource
      AND owner_id = v_owner
      AND fence = v_token
      AND expires_at > clock_timestamp()
    RETURNING expires_at INTO v_expires;
    RETURN v_expires;
END
$$;

-- release(resource, owner_id, token): true when this owner and token held the lease and gave
-- it up; the token is kept so the next owner gets a larger one (G1, G3).
CREATE FUNCTION outbox.release(resource text, owner_id uuid, token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_resource text := release.resource;
    v_owner uuid := release.owner_id;
    v_token bigint := release.token;
    v_done integer;
BEGIN
    PERFORM outbox.check_resource(v_resource);
    PERFORM outbox.check_owner(v_owner, v_token);
    UPDATE outbox_leases
    SET owner_id = NULL,
        expires_at = NULL
    WHERE resource = v_resource
      AND owner_id = v_owner
      AND fence = v_token;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    RETURN v_done = 1;
END
$$;

-- enqueue(…): records one op fenced by (resource, owner_id, token), inside the caller's
-- transaction: it commits or rolls back with the business write. Returns the op's id, its
-- sequence and whether it already existed with the same request (duplicate, G7). The insert
-- share-locks the lease row in the same statement, so a takeover waits for this transaction and
-- a lost lease inserts nothing (G4); only then are the lease and the key read, to say why.
-- Optional arguments may be NULL. Arguments after the first fifteen are additions (traceparent).
CREATE FUNCTION outbox.enqueue(resource text, owner_id uuid, token bigint, destination text,
                               method text, path text, headers jsonb DEFAULT NULL,
                               body bytea DEFAULT NULL, content_type text DEFAULT NULL,
                               idempotency_key text DEFAULT NULL, order_key text DEFAULT NULL,
                               unordered boolean DEFAULT false, not_before interval DEFAULT NULL,
                               supersede_pending boolean DEFAULT false,
                               expire_with_generation boolean DEFAULT false,
                               traceparent text DEFAULT NULL)
RETURNS TABLE (op_id uuid, seq bigint, duplicate boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    -- The arguments are used as they are (enqueue.resource, …), not copied: each copy would
    -- be one more expression to set up in every transaction.
    v_method text := upper(enqueue.method);
    v_headers jsonb := coalesce(enqueue.headers, '[]'::jsonb);
    v_body bytea := coalesce(enqueue.body, ''::bytea);
    v_not_before interval := coalesce(enqueue.not_before, interval '0');
    v_order_key text;
    v_op_id uuid := outbox.new_op_id();
    v_hash bytea;
    v_seq bigint;
    v_notified bigint;
    seen record;
    found_op record;
BEGIN
    -- One expression decides the common case; only input it does not vouch for goes through
    -- the detailed checks, which raise OB005 naming the field (or let it through).
    IF outbox.op_is_valid(enqueue.resource, enqueue.owner_id, enqueue.token,
                          enqueue.destination, enqueue.method, enqueue.path, v_headers, v_body,
                          enqueue.content_type, enqueue.idempotency_key, enqueue.order_key,
                          enqueue.unordered, v_not_before, enqueue.traceparent) IS NOT TRUE THEN
        PERFORM outbox.check_resource(enqueue.resource);
        PERFORM outbox.check_owner(enqueue.owner_id, enqueue.token);
        PERFORM outbox.check_op(enqueue.destination, enqueue.method, enqueue.path, v_headers,
                                v_body, enqueue.content_type, enqueue.idempotency_key,
                                enqueue.order_key, enqueue.unordered, v_not_before,
                                enqueue.traceparent);
    END IF;
    -- The default order key is the resource; unordered ops have none (G8).
    v_order_key := CASE
        WHEN coalesce(enqueue.unordered, false) THEN NULL
        ELSE coalesce(enqueue.order_key, enqueue.resource)
    END;
    v_hash := outbox.request_hash(v_method, enqueue.path, v_headers, enqueue.content_type, v_body);

    INSERT INTO outbox_ops AS o (op_id, resource, fence, owner_id, destination, idempotency_key,
                                 request_hash, order_key, partition, method, path, headers,
                                 content_type, body, expire_with_generation, next_attempt_at,
                                 trace_context)
    SELECT v_op_id, enqueue.resource, enqueue.token, enqueue.owner_id, enqueue.destination,
           enqueue.idempotency_key, v_hash, v_order_key,
           outbox.partition_slot(v_order_key, v_op_id), v_method, enqueue.path, v_headers,
           enqueue.content_type, v_body, coalesce(enqueue.expire_with_generation, false),
           clock_timestamp() + floor(extract(epoch FROM v_not_before) * 1000)::bigint * interval '1 millisecond',
           enqueue.traceparent
    FROM outbox_leases l
    WHERE l.resource = enqueue.resource
      AND l.owner_id = enqueue.owner_id
      AND l.fence = enqueue.token
      AND l.expires_at > clock_timestamp()
    FOR SHARE
    ON CONFLICT (destination, idempotency_key) DO NOTHING
    RETURNING o.id,
              (SELECT count(pg_notify('outbox_ops', w.partition::text))
               FROM outbox_wakeups w
               WHERE w.listening)
    INTO v_seq, v_notified;

    IF v_seq IS NOT NULL THEN
        IF coalesce(enqueue.supersede_pending, false) THEN
            -- Older tokens' pending ops of this resource and destination are never sent (G5).
            UPDATE outbox_ops
            SET state = 'superseded',
                finished_at = clock_timestamp(),
                last_error = 'superseded by token ' || enqueue.token
            WHERE resource = enqueue.resource
              AND destination = enqueue.destination
              AND fence < enqueue.token
              AND state = 'pending';
        END IF;
        op_id := v_op_id;
        seq := v_seq;
        duplicate := false;
        RETURN NEXT;
        RETURN;
    END IF;

    -- Nothing inserted: the lease, or the key. The insert's check was atomic; a lost lease
    -- never comes back to the same owner and token, so this read cannot contradict it.
    SELECT l.owner_id, l.fence, l.expires_at > clock_timestamp() AS live INTO seen
    FROM outbox_leases l
    WHERE l.resource = enqueue.resource;
    IF NOT FOUND THEN
        PERFORM outbox.reject('no_lease', enqueue.resource, enqueue.owner_id, enqueue.token, NULL,
                              enqueue.destination, enqueue.idempotency_key);
    ELSIF seen.fence <> enqueue.token
          OR (seen.owner_id IS NOT NULL AND seen.owner_id <> enqueue.owner_id) THEN
        PERFORM outbox.reject('stale', enqueue.resource, enqueue.owner_id, enqueue.token, seen.fence,
                              enqueue.destination, enqueue.idempotency_key);
    ELSIF seen.owner_id IS NULL THEN
        PERFORM outbox.reject('no_lease', enqueue.resource, enqueue.owner_id, enqueue.token, seen.fence,
                              enqueue.destination, enqueue.idempotency_key);
    ELSIF NOT seen.live THEN
        PERFORM outbox.reject('expired', enqueue.resource, enqueue.owner_id, enqueue.token, NULL,
                              enqueue.destination, enqueue.idempotency_key);
    END IF;

    SELECT f.id, f.op_id, f.request_hash INTO found_op
    FROM outbox_ops f
    WHERE f.destination = enqueue.destination
      AND f.idempotency_key = enqueue.idempotency_key;
    IF NOT FOUND THEN
        -- The op holding the key committed after this transaction's snapshot (REPEATABLE READ
        -- or SERIALIZABLE): retrying the transaction sees it.
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = 'the op holding this idempotency key is not visible to this transaction yet: retry';
    END IF;
    IF found_op.request_hash <> v_hash THEN
        RAISE EXCEPTION USING ERRCODE = 'OB004',
            MESSAGE = format('idempotency key %s of destination %s is already used for a different request by op %s',
                             enqueue.idempotency_key, enqueue.destination, found_op.op_id),
            DETAIL = json_build_object('existing_op_id', found_op.op_id,
                                       'destination', enqueue.destination,
                                       'idempotency_key', enqueue.idempotency_key)::text,
            HINT = 'the original op is kept and nothing was written; use another key for another request.';
    END IF;
    op_id := found_op.op_id;
    seq := found_op.id;
    duplicate := true;
    RETURN NEXT;
END
$$;
