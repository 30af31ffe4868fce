-- 0011_claim_honours_holds: the claim itself honours the destinations' holds (issue 28). An
-- operator's pause (outboxctl destination pause) and a circuit breaker that is open or
-- half-open are rows of outbox_destinations; each instance also keeps a view of them, re-read
-- every poll_interval, which decided what it claimed. A pause therefore took effect on an
-- instance only once its view was re-read: an op enqueued right after the pause returned could
-- still be claimed and sent. Now the claim reads the rows in the same statement that checks
-- the partition lease (as G9 is enforced), so nothing is claimed by any instance for a
-- destination whose pause committed before the claim began; the view stays a cache (probes,
-- when to look again).
--
-- New parameter breakers: the destinations (among those asked for) whose breaker is on, held
-- while it is not closed; a breaker's probe passes none (the probe take decides, paused or not
-- is still the row's). The rest of the statement, its settings and its parameters are those of
-- 0010_pooler_safe_sessions.sql.
DROP FUNCTION outbox_op_claim_due(text, uuid, bigint, integer, integer, text[], bigint, bigint);

CREATE FUNCTION outbox_op_claim_due(
    lease_resource text, lease_owner uuid, lease_fence bigint, partition_count integer,
    partition_index integer, destinations text[], breakers text[], max_ops bigint,
    max_body_bytes bigint)
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
          -- Held destinations, read once per claim (an uncorrelated subquery of a small
          -- table): an operator's pause and a breaker that is not closed hold the destination
          -- for every instance from the commit that set them.
          AND o.destination <> ALL(ARRAY(
                SELECT d.destination FROM outbox_destinations d
                WHERE d.paused_at IS NOT NULL
                   OR (d.state <> 'closed' AND d.destination = ANY(breakers))))
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
