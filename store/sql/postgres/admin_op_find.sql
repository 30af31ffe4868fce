-- outboxctl show/replay/cancel OP_ID: the row id of an op named by its public id.
-- Parameters: $1 op id (text; a UUID).
SELECT id
FROM outbox_requests
WHERE op_id = $1::uuid
