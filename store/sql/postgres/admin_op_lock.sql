-- outboxctl replay/cancel: the ops to change, locked for this transaction, with their
-- resource's newest token. The lock is on the row that holds the op's state: its queue row
-- (a dispatcher's claim skips it, its completion waits) or its finished row (the purges skip
-- it), so the state read here is the state changed: an op is never in two states. An op whose
-- queue row a completion removed after this statement began, and whose finished row it cannot
-- see yet, reads as in flight (it was, a moment ago): it is refused, never changed twice.
-- A finished op's erased_at (0017_content_at_rest.sql) is read under the same lock: an erased op
-- has nothing left to send, and replay refuses it.
-- Parameters: $1 op row ids (bigint[]).
WITH q AS (
    SELECT id, claimed_by_fence
    FROM outbox_queue
    WHERE id = ANY($1::bigint[])
    FOR UPDATE
), f AS (
    SELECT id, state, erased_at
    FROM outbox_finished
    WHERE id = ANY($1::bigint[])
    FOR UPDATE
)
SELECT o.id, o.op_id::text AS op_id,
       CASE WHEN q.id IS NOT NULL
            THEN CASE WHEN q.claimed_by_fence IS NULL THEN 'pending' ELSE 'in_flight' END
            ELSE coalesce(f.state, 'in_flight') END AS state,
       o.fence, l.fence AS resource_fence, f.erased_at
FROM outbox_requests o
LEFT JOIN q ON q.id = o.id
LEFT JOIN f ON f.id = o.id
LEFT JOIN outbox_leases l ON l.resource = o.resource
WHERE o.id = ANY($1::bigint[])
ORDER BY o.id
