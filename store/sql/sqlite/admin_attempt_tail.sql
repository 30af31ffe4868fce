-- outboxctl tail: attempts recorded after the last one shown, oldest first.
-- Parameters: ?1 last attempt id shown (0: from the start), ?2 how many at most.
SELECT a.id, o.id AS seq, o.op_id, o.destination, o.resource, a.attempt, a.dispatcher_fence,
       a.started_at, a.finished_at,
       CAST((julianday(a.finished_at) - julianday(a.started_at)) * 86400000 AS INTEGER)
           AS duration_ms,
       a.outcome, a.http_status, a.error, a.response_excerpt, a.trace_context
FROM outbox_attempts a
JOIN outbox_requests o ON o.op_id = a.op_id
WHERE a.id > ?1
ORDER BY a.id
LIMIT ?2
