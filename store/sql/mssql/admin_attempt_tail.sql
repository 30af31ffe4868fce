-- outboxctl tail: attempts recorded after the last one shown, oldest first (the primary key
-- forwards from @P1). A plain read for operators (a statement snapshot under READ COMMITTED
-- SNAPSHOT, short shared locks under READ COMMITTED): an attempt committed later with a lower
-- id than one already shown is not shown, as on PostgreSQL.
-- Parameters: @P1 last attempt id shown (bigint; 0: from the start), @P2 how many at most
-- (bigint).
-- Returns id bigint, seq bigint, op_id uniqueidentifier, destination varchar, resource
-- nvarchar, attempt int, dispatcher_fence bigint, started_at datetimeoffset, finished_at
-- datetimeoffset (NULL), duration_ms bigint (NULL), outcome varchar (NULL), http_status int
-- (NULL), error nvarchar (NULL), response_excerpt nvarchar (NULL),
-- trace_context varchar (NULL, the attempt span's traceparent); one row per attempt.
SELECT TOP (@P2) a.id,
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
FROM dbo.outbox_attempts AS a
INNER JOIN dbo.outbox_requests AS o ON o.op_id = a.op_id
WHERE a.id > @P1
ORDER BY a.id;
