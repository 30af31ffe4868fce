-- outboxctl show: an op's attempts, first to last, each with its duration.
-- Parameters: $1 op row id.
SELECT a.id, o.id AS seq, o.op_id::text AS op_id, o.destination, o.resource, a.attempt,
       a.dispatcher_fence, a.started_at, a.finished_at,
       (extract(epoch FROM a.finished_at - a.started_at) * 1000)::bigint AS duration_ms,
       a.outcome, a.http_status, a.error, a.response_excerpt, a.trace_context
FROM outbox_requests o
JOIN outbox_attempts a ON a.op_id = o.op_id
WHERE o.id = $1
ORDER BY a.attempt
