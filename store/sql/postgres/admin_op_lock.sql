-- outboxctl replay/cancel: the ops to change, locked for this transaction, with their
-- resource's newest token. A dispatcher's claim skips locked rows and its completion waits,
-- so the state read here is the state changed: an op is never in two states.
-- Parameters: $1 op row ids (bigint[]).
SELECT o.id, o.op_id::text AS op_id, o.state, o.fence, l.fence AS resource_fence
FROM outbox_ops o
LEFT JOIN outbox_leases l ON l.resource = o.resource
WHERE o.id = ANY($1::bigint[])
ORDER BY o.id
FOR UPDATE OF o
