-- outboxctl replay/cancel: the ops to change, with their state (the view outbox_ops: queue
-- row or finished row) and their resource's newest token. Run inside the change's
-- BEGIN IMMEDIATE transaction: SQLite's single writer lock keeps every dispatcher statement
-- out until it commits, so an op is never in two states.
-- Parameters: ?1 op row ids (a JSON array).
SELECT o.id, o.op_id, o.state, o.fence, l.fence AS resource_fence
FROM outbox_ops o
LEFT JOIN outbox_leases l ON l.resource = o.resource
WHERE o.id IN (SELECT value FROM json_each(?1))
ORDER BY o.id
