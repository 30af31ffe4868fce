-- The ops op_claim_due.sql just claimed, read in the claim's transaction: each queue row with
-- its request by primary key (SQLite's RETURNING reads only the table it updates). A queue row
-- without its request is still returned, so the dispatcher makes it dead as unreadable
-- instead of leaving it claimed.
-- Parameters: ?1 the claimed op row ids (JSON array), ?2 the dispatcher's max_body_bytes.
-- Returns the claimed ops, their attempt number already counted; the body only when it is
-- within ?2 (a larger one is never loaded: the dispatcher makes the op dead by body_bytes).
SELECT q.id, r.op_id, r.resource, r.fence, r.destination, r.idempotency_key, r.method, r.path,
       r.headers, r.content_type,
       CASE WHEN length(CAST(r.body AS BLOB)) <= ?2 THEN r.body ELSE x'' END AS body,
       length(CAST(r.body AS BLOB)) AS body_bytes, q.attempts, r.created_at, q.claimed_at,
       r.trace_context, r.trace_state, q.last_attempt_trace,
       q.attempts - q.retry_base_attempts AS budget_attempt,
       coalesce(q.retry_since, r.created_at) AS budget_since
FROM json_each(?1) AS c
CROSS JOIN outbox_queue AS q
LEFT JOIN outbox_requests AS r ON r.id = q.id
WHERE q.id = c.value
ORDER BY q.id
