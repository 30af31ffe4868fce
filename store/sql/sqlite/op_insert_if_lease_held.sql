-- The fenced enqueue's request: insert it only if this owner and token hold an unexpired
-- lease by the database clock (G4), and skip it if the (destination, idempotency key) exists
-- (G7). A write statement holds SQLite's write lock from its start, so the check and the
-- insert are atomic. Its queue row follows (op_queue_insert.sql), inside the same savepoint:
-- SQLite has no data-modifying WITH (0013_queue_layout.sql).
-- Parameters: ?1 resource, ?2 owner id, ?3 token, ?4 op id, ?5 destination,
-- ?6 idempotency key, ?7 request hash, ?8 order key, ?9 partition, ?10 method, ?11 path,
-- ?12 headers (JSON text), ?13 content type, ?14 body, ?15 expire_with_generation,
-- ?16 traceparent, ?17 tracestate.
-- Returns the new op's id, or no row when nothing was inserted.
INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, idempotency_key,
                             request_hash, order_key, partition, method, path, headers,
                             content_type, body, expire_with_generation, trace_context,
                             trace_state)
SELECT ?4, ?1, ?3, ?2, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17
FROM outbox_leases
WHERE resource = ?1
  AND owner_id = ?2
  AND fence = ?3
  AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
ON CONFLICT (destination, idempotency_key) DO NOTHING
RETURNING id
