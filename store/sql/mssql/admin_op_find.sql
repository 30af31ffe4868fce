-- outboxctl show/replay/cancel OP_ID: the row id of an op named by its public id
-- (outbox_requests' UQ_outbox_ops_op_id). A plain read for operators: a statement snapshot
-- under READ COMMITTED SNAPSHOT, a short shared lock under READ COMMITTED; a change locks the
-- op again by row id.
-- Parameters: @P1 op id (uniqueidentifier).
-- Returns id (bigint), or no row.
SELECT id
FROM dbo.outbox_requests
WHERE op_id = @P1;
