-- One row per delivery attempt, written with the completion that ends it.
-- Parameters: ?1 op id, ?2 attempt number, ?3 dispatcher token, ?4 started at (the claim's
-- database time), ?5 outcome ('delivered' | 'failed' | 'unknown'), ?6 HTTP status,
-- ?7 error (bounded), ?8 response excerpt (bounded), ?9 the attempt's span traceparent.
INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at, outcome,
                             http_status, error, response_excerpt, trace_context)
VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (op_id, attempt) DO NOTHING
