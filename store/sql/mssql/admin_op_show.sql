-- outboxctl show: one op with everything operators ask about, and its resource's newest token
-- (an op of an older token is superseded for replay). Reads the view dbo.outbox_ops
-- (0013_queue_layout.sql): the request by its primary key with its queue or finished row by
-- theirs, then the lease's. Not the content: the body's size and the header names come from
-- dbo.outbox_request_meta (0018_database_roles.sql), so the viewer role, which may not read a
-- body or a header value, runs this too; admin_op_content.sql reads the content.
-- A plain read for operators: a statement snapshot under READ COMMITTED SNAPSHOT, short
-- shared locks under READ COMMITTED; a change locks the op again (admin_op_lock.sql).
-- Parameters: @P1 op row id (bigint).
-- Returns id bigint, op_id uniqueidentifier, resource nvarchar, fence bigint, owner_id
-- uniqueidentifier, destination varchar, idempotency_key varchar, order_key nvarchar (NULL),
-- method varchar, path nvarchar, header_names nvarchar (a JSON array), content_type nvarchar
-- (NULL),
-- body_bytes bigint, state varchar, attempts int, next_attempt_at
-- datetimeoffset, claimed_by_fence bigint (NULL), claimed_at datetimeoffset (NULL),
-- last_error nvarchar (NULL), trace_context varchar (NULL), trace_state
-- varchar (NULL), created_at datetimeoffset,
-- delivered_at datetimeoffset (NULL), finished_at datetimeoffset (NULL), retry_base_attempts
-- int, retry_since datetimeoffset (NULL), resource_fence bigint (NULL), erased_at
-- datetimeoffset (NULL: not erased, 0017_content_at_rest.sql); or no row.
SELECT o.id,
       o.op_id,
       o.resource,
       o.fence,
       o.owner_id,
       o.destination,
       o.idempotency_key,
       o.order_key,
       o.method,
       o.path,
       m.header_names,
       o.content_type,
       m.body_bytes,
       o.state,
       o.attempts,
       o.next_attempt_at,
       o.claimed_by_fence,
       o.claimed_at,
       o.last_error,
       o.trace_context,
       o.trace_state,
       o.created_at,
       o.delivered_at,
       o.finished_at,
       o.retry_base_attempts,
       o.retry_since,
       l.fence AS resource_fence,
       f.erased_at
FROM dbo.outbox_ops AS o
INNER JOIN dbo.outbox_request_meta AS m ON m.id = o.id
LEFT JOIN dbo.outbox_finished AS f ON f.id = o.id
LEFT JOIN dbo.outbox_leases AS l ON l.resource = o.resource
WHERE o.id = @P1;
