-- outboxctl show: one op with everything operators ask about, and its resource's newest token
-- (an op of an older token is superseded for replay). Not its content: the body's size and
-- the header names come from outbox_request_meta (0016_component_roles.sql), so the viewer
-- role, which may not read a body or a header value, runs this too; admin_op_content.sql
-- reads the content. erased_at: when erasure after delivery cleared the content
-- (0017_content_at_rest.sql).
-- Parameters: $1 op row id.
SELECT o.id, o.op_id::text AS op_id, o.resource, o.fence, o.owner_id::text AS owner_id,
       o.destination, o.idempotency_key, o.order_key, o.method, o.path,
       m.header_names, o.content_type, m.body_bytes,
       o.state, o.attempts, o.next_attempt_at, o.claimed_by_fence, o.claimed_at, o.last_error,
       o.trace_context, o.trace_state, o.created_at, o.delivered_at, o.finished_at, o.retry_base_attempts,
       o.retry_since, l.fence AS resource_fence, f.erased_at
FROM outbox_ops o
JOIN outbox_request_meta m ON m.id = o.id
LEFT JOIN outbox_finished f ON f.id = o.id
LEFT JOIN outbox_leases l ON l.resource = o.resource
WHERE o.id = $1
