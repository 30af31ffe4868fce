-- outboxctl show: one op with everything operators ask about, and its resource's newest token
-- (an op of an older token is superseded for replay). Reads the view outbox_ops
-- (0013_queue_layout.sql): the request with its queue or finished row. Not its content: the
-- body's size and the header names (admin_op_content.sql reads the content). erased_at: when
-- erasure after delivery cleared the content (0017_content_at_rest.sql).
-- Parameters: ?1 op row id.
SELECT o.id, o.op_id, o.resource, o.fence, o.owner_id, o.destination, o.idempotency_key,
       o.order_key, o.method, o.path,
       (SELECT json_group_array(json_extract(h.value, '$[0]')) FROM json_each(o.headers) h)
           AS header_names,
       o.content_type, length(o.body) AS body_bytes, o.state, o.attempts, o.next_attempt_at, o.claimed_by_fence,
       o.claimed_at, o.last_error, o.trace_context, o.trace_state, o.created_at, o.delivered_at, o.finished_at,
       o.retry_base_attempts, o.retry_since, l.fence AS resource_fence, f.erased_at
FROM outbox_ops o
LEFT JOIN outbox_finished f ON f.id = o.id
LEFT JOIN outbox_leases l ON l.resource = o.resource
WHERE o.id = ?1
