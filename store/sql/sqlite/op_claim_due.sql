-- Claim due ops of one dispatcher partition for delivery (G8, G9): their queue rows get this
-- claim and count the attempt (0013_queue_layout.sql; no indexed column changes, so no index
-- entry is written).
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
-- breaker (JSON array; none for a breaker's probe), ?8 how many at most in all, ?9 each
-- destination's room (JSON array of integers, in the order of ?6).
-- Returns the claimed ops' ids; op_claimed_read.sql reads them, in the same transaction.
-- The claim records the lease resource beside its token (0003_hardening.sql).
UPDATE outbox_queue
SET claimed_by_fence = ?3,
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
            SELECT q.id, q.destination, q.next_attempt_at
            -- Walk the due index in due order and stop at the limit; in-flight rows are in
            -- it too and skipped by the claim check.
            FROM outbox_queue AS q INDEXED BY outbox_queue_due_idx
            WHERE EXISTS (
                    SELECT 1 FROM outbox_leases
                    WHERE resource = ?1 AND owner_id = ?2 AND fence = ?3
                      AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
              AND q.next_attempt_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
              AND q.claimed_by_fence IS NULL
              AND q.partition % ?4 = ?5
              AND q.destination IN (SELECT value FROM json_each(?6))
              AND q.destination NOT IN (
                    SELECT d.destination FROM outbox_destinations AS d
                    WHERE d.paused_at IS NOT NULL
                       OR (d.state <> 'closed'
                           AND d.destination IN (SELECT value FROM json_each(?7))))
              AND (q.order_key IS NULL OR NOT EXISTS (
                    SELECT 1
                    FROM outbox_queue x
                    WHERE x.order_key = q.order_key
                      AND (x.claimed_by_fence IS NOT NULL OR (x.fence, x.id) < (q.fence, q.id))))
              AND NOT (q.expire_with_generation = 1 AND q.fence < (
                    SELECT l.fence
                    FROM outbox_requests rq
                    JOIN outbox_leases l ON l.resource = rq.resource
                    WHERE rq.id = q.id))
            ORDER BY q.next_attempt_at, q.id
            LIMIT ?8
        ) AS c
    ) AS r
    JOIN json_each(?6) AS name ON name.value = r.destination
    JOIN json_each(?9) AS room ON room.key = name.key
    WHERE r.nth <= room.value
)
RETURNING id
