-- outboxctl list: one page of ops, newest first. admin.rs appends the filters that are set
-- (fixed SQL fragments with bound values), then ORDER BY id DESC LIMIT. Each op is its request
-- with its queue row (unfinished) or its finished row (0013_queue_layout.sql), so the page is
-- read walking the requests' primary key backwards, not through the view outbox_ops (whose
-- union PostgreSQL cannot read in id order). The requests are read through
-- outbox_request_meta (0016_component_roles.sql): the table without its content, which the
-- viewer role may read; PostgreSQL plans the view as the table. Indexes: that key with no filter, --destination,
-- --since and --before (each a large share of a table that grows by id);
-- outbox_ops_resource_idx for --resource; outbox_finished_attention_idx for --state dead,
-- cancelled or superseded, and the queue for --state pending or in_flight (admin.rs adds
-- the semi-join that names them); the requests' (destination, idempotency_key) key for --key
-- (one probe per destination in use, from admin_destination_list.sql, when --destination is
-- not given).
SELECT id, op_id, resource, fence, destination, idempotency_key, state, attempts,
       next_attempt_at, created_at, finished_at, last_error, body_bytes
FROM (
    SELECT r.id, r.op_id::text AS op_id, r.resource, r.fence, r.destination, r.idempotency_key,
           CASE WHEN q.id IS NULL THEN f.state
                WHEN q.claimed_by_fence IS NULL THEN 'pending'
                ELSE 'in_flight' END AS state,
           coalesce(q.attempts, f.attempts) AS attempts,
           coalesce(q.next_attempt_at, f.next_attempt_at) AS next_attempt_at,
           r.created_at, f.finished_at,
           CASE WHEN q.id IS NULL THEN f.last_error ELSE q.last_error END AS last_error,
           r.body_bytes
    FROM outbox_request_meta r
    LEFT JOIN outbox_queue q ON q.id = r.id
    LEFT JOIN outbox_finished f ON f.id = r.id
) AS o
WHERE true
