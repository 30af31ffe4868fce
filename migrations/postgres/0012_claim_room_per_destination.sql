-- 0012_claim_room_per_destination: a claim takes no more of a destination's ops than that
-- destination can start (issue 34). The dispatcher used to pass one limit for all the
-- destinations it asked for (the sum of their free slots): with one destination busy and
-- another idle, a claim took up to the idle one's free slots of the busy one's ops, started
-- one and gave the others back, a statement each, after every completion. Now each
-- destination comes with its own room (free slots, rate budget), and the claim keeps, of the
-- due ops it chose in due order, at most that many of each.
--
-- New parameter room: how many ops at most of each destination, in the order of
-- destinations. The chosen ops are still read in due order from the partial due index and
-- locked (FOR UPDATE SKIP LOCKED) as before, max_ops at most; those past their destination's
-- room are left pending, unlocked at the statement's commit. The rest of the statement, its
-- settings and its parameters are those of 0011_claim_honours_holds.sql.
DROP FUNCTION outbox_op_claim_due(text, uuid, bigint, integer, integer, text[], text[], bigint,
                                  bigint);

CREATE FUNCTION outbox_op_claim_due(
    lease_resource text, lease_owner uuid, lease_fence bigint, partition_count integer,
    partition_index integer, destinations text[], room integer[], breakers text[],
    max_ops bigint, max_body_bytes bigint)
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
        SELECT o.id, o.destination, o.next_attempt_at
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
    ), chosen AS (
        -- Of each destination, the first `room` of the candidates in due order: a window over
        -- at most max_ops rows (a locking clause cannot stand beside a window function).
        SELECT r.id
        FROM (SELECT c.id, c.destination,
                     row_number() OVER (PARTITION BY c.destination
                                        ORDER BY c.next_attempt_at, c.id) AS nth
              FROM candidates c) r
        JOIN unnest(destinations, room) AS d(name, ops) ON d.name = r.destination
        WHERE r.nth <= d.ops
    )
    UPDATE outbox_ops o
    SET state = 'in_flight',
        claimed_by_fence = lease_fence,
        claimed_by_lease = lease_resource,
        claimed_at = clock_timestamp(),
        attempts = o.attempts + 1
    FROM chosen c
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
