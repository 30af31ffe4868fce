-- outboxctl show/replay/cancel OP_ID: the row id of an op named by its public id.
-- Parameters: ?1 op id (a hyphenated UUID, lowercase, as stored).
SELECT id
FROM outbox_requests
WHERE op_id = ?1
