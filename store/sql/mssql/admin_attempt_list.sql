-- outboxctl show: an op's attempts, first to last, each with its duration (DATEDIFF_BIG in
-- milliseconds; NULL while the attempt has no end). Found by UQ_outbox_attempts_op_attempt
-- (op_id, attempt), already in attempt order. A plain read for operators (a statement
-- snapshot under READ COMMITTED SNAPSHOT, short shared locks under READ COMMITTED).
-- Parameters: @P1 op row id (bigint).
-- Returns id bigint, seq bigint, op_id uniqueidentifier, destination varchar, resource
-- nvarchar, attempt int, dispatcher_fence bigint, started_at datetimeoffset, finished_at
-- datetimeoffset (NULL), duration_ms bigint (NULL), outcome varchar (NULL), http_status int
-- (NULL), error nvarchar (NULL), response_excerpt nvarchar (NULL),
-- trace_context varchar (NULL, the attempt span's traceparent); one row per attempt.
SELECT a.id,
       o.id AS seq,
       o.op_id,
       o.destination,
       o.resource,
       a.attempt,
       a.dispatcher_fence,
       a.started_at,
       a.finished_at,
       DATEDIFF_BIG(MILLISECOND, a.started_at, a.finished_at) AS duration_ms,
       a.outcome,
       a.http_status,
       a.error,
       a.response_excerpt,
       a.trace_context
FROM dbo.outbox_requests AS o
INNER JOIN dbo.outbox_attempts AS a ON a.op_id = o.op_id
WHERE o.id = @P1
ORDER BY a.attempt;
