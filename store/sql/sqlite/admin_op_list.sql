-- outboxctl list: one page of ops, newest first. admin.rs appends the filters that are set
-- (fixed SQL fragments with bound values), then ORDER BY id DESC LIMIT. Reads the view
-- outbox_ops (0013_queue_layout.sql): each request with its queue or finished row joined by
-- primary key, so the filters on request columns use the requests' indexes. Indexes: the
-- primary key backwards with no filter, --destination (written +destination, so SQLite walks
-- ids instead of sorting a destination's ops), --since and --before (each a large share of a
-- table that grows by id); outbox_ops_resource_idx for --resource;
-- outbox_finished_attention_idx for --state dead, cancelled or superseded (admin.rs adds the
-- semi-join that names them, with the index's predicate word for word, which SQLite needs),
-- and the queue for --state pending or in_flight; the requests' (destination,
-- idempotency_key) key for --key (one probe per destination in use, from
-- admin_destination_list.sql, when --destination is not given).
SELECT id, op_id, resource, fence, destination, idempotency_key, state, attempts,
       next_attempt_at, created_at, finished_at, last_error, length(body) AS body_bytes
FROM outbox_ops
WHERE 1
