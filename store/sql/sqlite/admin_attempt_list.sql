-- outboxctl show: an op's attempts, first to last, each with its duration.
-- Parameters: ?1 op row id.
SELECT a.id, o.id AS seq, o.op_id, o.destination, o.resource, a.attempt, a.dispatcher_fence,
       a.started_at, a.finished_at,
       CAST((julianday(a.finished_at) - julianday(a.started_at)) * 86400000 AS INTEGER)
           AS duration_ms,
       a.outcome, a.http_status, a.error, a.response_excerpt, a.trace_context
FROM outbox_requests o
JOIN outbox_attempts a ON a.op_id = o.op_id
WHERE o.id = ?1
ORDER BY a.attempt
