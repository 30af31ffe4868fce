-- 0010_pooler_safe_sessions: the claim carries its own planner settings, so the store's sessions
-- need none. Connection poolers in transaction mode (PgBouncer, managed poolers) refuse startup
-- options and would leak a session-level SET to other clients; a function's SET clauses apply
-- while it runs and end with it, whatever connection it runs on (issue 27).
--
-- The claim must walk outbox_ops_due_idx in order. Without fresh statistics (a new table, or a
-- burst of ops after a quiet period, until autovacuum analyzes) the planner estimates one due op,
-- reads every due op through another index and sorts them: 216 ms per claim of 128 at 200k
-- pending, against 4.7 ms walking the index (EXPLAIN ANALYZE, PostgreSQL 15). So sorts are off
-- here, and JIT too: it compiles any statement the planner costs high, which this one is with
-- sorts off, for hundreds of milliseconds on a statement that runs in well under one.
-- PL/pgSQL keeps the statement's plan for the session (a generic plan after the first runs), as
-- a named prepared statement would, so a pooled client that prepares nothing pays no planning.
--
-- Claim due ops of one dispatcher partition for delivery (G8, G9).
-- Only while the partition lease has this owner and token and is unexpired (share-locked, so
-- no takeover commits under the claim); only ops whose destination is configured; per order
-- key only the head (lowest token, then sequence) and only when nothing of that key is in
-- flight; never an expire_with_generation op whose token is no longer its resource's newest.
-- Returns the claimed ops, their attempt number already counted; the body only when it is
-- within max_body_bytes (a larger one is never loaded: the dispatcher makes the op dead by
-- body_bytes). The claim records the lease resource beside its token (0003_hardening.sql).
CREATE FUNCTION outbox_op_claim_due(
    lease_resource text, lease_owner uuid, lease_fence bigint, partition_count integer,
    partition_index integer, destinations text[], max_ops bigint, max_body_bytes bigint)
RETURNS TABLE (id bigint, op_id uuid, resource text, fence bigint, destination text,
               idempotency_key text, method text, path text, headers text, content_type text,
               body bytea, body_bytes bigint, attempts integer, created_at timestamptz,
               claimed_at timestamptz, trace_context text, trace_state text,
               last_attempt_trace text, budget_attempt integer, budget_since timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH lease AS (
        SELECT 1
        FROM outbox_leases
        WHERE outbox_leases.resource = lease_resource AND owner_id = lease_owner
          AND outbox_leases.fence = lease_fence AND expires_at > clock_timestamp()
        FOR SHARE
    ), candidates AS (
        SELECT o.id
        FROM outbox_ops o
        WHERE EXISTS (SELECT 1 FROM lease)
          AND o.state = 'pending'
          AND o.next_attempt_at <= clock_timestamp()
          AND o.partition % partition_count = partition_index
          AND o.destination = ANY(destinations)
          AND (o.order_key IS NULL OR NOT EXISTS (
                SELECT 1
                FROM outbox_ops x
                WHERE x.order_key = o.order_key
                  AND x.state IN ('pending', 'in_flight')
                  AND (x.state = 'in_flight' OR (x.fence, x.id) < (o.fence, o.id))))
          AND NOT (o.expire_with_generation AND o.fence < (
                SELECT l.fence FROM outbox_leases l WHERE l.resource = o.resource))
        ORDER BY o.next_attempt_at, o.id
        LIMIT max_ops
        FOR UPDATE OF o SKIP LOCKED
    )
    UPDATE outbox_ops o
    SET state = 'in_flight',
        claimed_by_fence = lease_fence,
        claimed_by_lease = lease_resource,
        claimed_at = clock_timestamp(),
        attempts = o.attempts + 1
    FROM candidates c
    WHERE o.id = c.id
    RETURNING o.id, o.op_id, o.resource, o.fence, o.destination, o.idempotency_key, o.method,
              o.path, o.headers::text, o.content_type,
              CASE WHEN octet_length(o.body) <= max_body_bytes THEN o.body ELSE '\x'::bytea END,
              octet_length(o.body)::bigint, o.attempts,
              o.created_at, o.claimed_at, o.trace_context, o.trace_state, o.last_attempt_trace,
              o.attempts - o.retry_base_attempts,
              coalesce(o.retry_since, o.created_at);
END
$$;
