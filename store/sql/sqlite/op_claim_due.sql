-- Claim due ops of one dispatcher partition for delivery (G8, G9).
-- Only while the partition lease has this owner and token and is unexpired (one writer: the
-- check and the update are atomic); only ops whose destination is configured; per order key
-- only the head (lowest token, then sequence) and only when nothing of that key is in flight;
-- never an expire_with_generation op whose token is no longer its resource's newest; never an
-- op of a held destination: paused by an operator, or its breaker (among ?7) not closed
-- (issue 28: read in this statement, so a pause holds every instance from its commit); of
-- each destination no more than its room, what it can start now (issue 34): of the due ops
-- chosen in due order (?8 at most), a window keeps the first ones of each destination.
-- Parameters: ?1 partition lease resource, ?2 owner id, ?3 token, ?4 partition count,
-- ?5 partition index, ?6 configured destinations (JSON array), ?7 those of them with a
-- breaker (JSON array; none for a breaker's probe), ?8 how many at most in all, ?9 the
-- dispatcher's max_body_bytes, ?10 each destination's room (JSON array of integers, in the
-- order of ?6).
-- Returns the claimed ops, their attempt number already counted; the body only when it is
-- within ?9 (a larger one is never loaded: the dispatcher makes the op dead by body_bytes).
-- The claim records the lease resource beside its token (0003_hardening.sql).
UPDATE outbox_ops
SET state = 'in_flight',
    claimed_by_fence = ?3,
    claimed_by_lease = ?1,
    claimed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    attempts = attempts + 1
WHERE id IN (
    SELECT r.id
    FROM (
        SELECT c.id, c.destination,
               row_number() OVER (PARTITION BY c.destination
                                  ORDER BY c.next_attempt_at, c.id) AS nth
        FROM (
            SELECT o.id, o.destination, o.next_attempt_at
            -- Walk the partial due index in due order and stop at the limit; left to itself
            -- the planner picks the (destination, key) index and sorts every op of the
            -- destination, history included.
            FROM outbox_ops AS o INDEXED BY outbox_ops_due_idx
            WHERE EXISTS (
                    SELECT 1 FROM outbox_leases
                    WHERE resource = ?1 AND owner_id = ?2 AND fence = ?3
                      AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
              AND o.state = 'pending'
              AND o.next_attempt_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
              AND o.partition % ?4 = ?5
              AND o.destination IN (SELECT value FROM json_each(?6))
              AND o.destination NOT IN (
                    SELECT d.destination FROM outbox_destinations AS d
                    WHERE d.paused_at IS NOT NULL
                       OR (d.state <> 'closed'
                           AND d.destination IN (SELECT value FROM json_each(?7))))
              AND (o.order_key IS NULL OR NOT EXISTS (
                    SELECT 1
                    FROM outbox_ops x
                    WHERE x.order_key = o.order_key
                      AND x.state IN ('pending', 'in_flight')
                      AND (x.state = 'in_flight' OR (x.fence, x.id) < (o.fence, o.id))))
              AND NOT (o.expire_with_generation = 1 AND o.fence < (
                    SELECT l.fence FROM outbox_leases l WHERE l.resource = o.resource))
            ORDER BY o.next_attempt_at, o.id
            LIMIT ?8
        ) AS c
    ) AS r
    JOIN json_each(?6) AS name ON name.value = r.destination
    JOIN json_each(?10) AS room ON room.key = name.key
    WHERE r.nth <= room.value
)
RETURNING id, op_id, resource, fence, destination, idempotency_key, method, path, headers,
          content_type,
          CASE WHEN length(CAST(body AS BLOB)) <= ?9 THEN body ELSE x'' END AS body,
          length(CAST(body AS BLOB)) AS body_bytes, attempts, created_at, claimed_at, trace_context,
          trace_state, last_attempt_trace,
          attempts - retry_base_attempts AS budget_attempt,
          coalesce(retry_since, created_at) AS budget_since
