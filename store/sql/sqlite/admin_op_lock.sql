-- outboxctl replay/cancel: the ops to change, with their state (the view outbox_ops: queue
-- row or finished row) and their resource's newest token. Run inside the change's
-- BEGIN IMMEDIATE transaction: SQLite's single writer lock keeps every dispatcher statement
-- out until it commits, so an op is never in two states.
-- A finished op's erased_at (0017_content_at_rest.sql): replay refuses an erased op.
-- Parameters: ?1 op row ids (a JSON array).
SELECT o.id, o.op_id, o.state, o.fence, l.fence AS resource_fence, f.erased_at
FROM outbox_ops o
LEFT JOIN outbox_finished f ON f.id = o.id
LEFT JOIN outbox_leases l ON l.resource = o.resource
WHERE o.id IN (SELECT value FROM json_each(?1))
ORDER BY o.id
