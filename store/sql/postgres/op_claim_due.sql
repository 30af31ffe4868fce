-- Claim due ops of one dispatcher partition for delivery (G8, G9).
-- Only while the partition lease has this owner and token and is unexpired (share-locked, so
-- no takeover commits under the claim); only ops whose destination is configured; per order
-- key only the head (lowest token, then sequence) and only when nothing of that key is in
-- flight; never an expire_with_generation op whose token is no longer its resource's newest.
-- Parameters: $1 partition lease resource, $2 owner id, $3 token, $4 partition count,
-- $5 partition index, $6 configured destinations (text[]), $7 how many at most, $8 the
-- dispatcher's max_body_bytes.
-- Returns the claimed ops, their attempt number already counted; the body only when it is
-- within $8 (a larger one is never loaded: the dispatcher makes the op dead by body_bytes).
-- The claim records the lease resource beside its token (0003_hardening.sql).
WITH lease AS (
    SELECT 1
    FROM outbox_leases
    WHERE resource = $1 AND owner_id = $2 AND fence = $3 AND expires_at > clock_timestamp()
    FOR SHARE
), candidates AS (
    SELECT o.id
    FROM outbox_ops o
    WHERE EXISTS (SELECT 1 FROM lease)
      AND o.state = 'pending'
      AND o.next_attempt_at <= clock_timestamp()
      AND o.partition % $4 = $5
      AND o.destination = ANY($6::text[])
      AND (o.order_key IS NULL OR NOT EXISTS (
            SELECT 1
            FROM outbox_ops x
            WHERE x.order_key = o.order_key
              AND x.state IN ('pending', 'in_flight')
              AND (x.state = 'in_flight' OR (x.fence, x.id) < (o.fence, o.id))))
      AND NOT (o.expire_with_generation AND o.fence < (
            SELECT l.fence FROM outbox_leases l WHERE l.resource = o.resource))
    ORDER BY o.next_attempt_at, o.id
    LIMIT $7
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE outbox_ops o
SET state = 'in_flight',
    claimed_by_fence = $3,
    claimed_by_lease = $1,
    claimed_at = clock_timestamp(),
    attempts = o.attempts + 1
FROM candidates c
WHERE o.id = c.id
RETURNING o.id, o.op_id, o.resource, o.fence, o.destination, o.idempotency_key, o.method,
          o.path, o.headers::text AS headers, o.content_type,
          CASE WHEN octet_length(o.body) <= $8 THEN o.body ELSE '\x'::bytea END AS body,
          octet_length(o.body)::bigint AS body_bytes, o.attempts,
          o.created_at, o.claimed_at, o.trace_context, o.trace_state, o.last_attempt_trace,
          o.attempts - o.retry_base_attempts AS budget_attempt,
          coalesce(o.retry_since, o.created_at) AS budget_since
