-- 0007_trace_links: the producer's tracestate, and the traceparent of each attempt's span on
-- the attempt and (the latest) on the op (see migrations/postgres/0007_trace_links.sql). The
-- producer and the dispatcher bound what they write; SQLite cannot add a CHECK to a column
-- without rebuilding the table.
ALTER TABLE outbox_ops ADD COLUMN trace_state TEXT NULL;
ALTER TABLE outbox_ops ADD COLUMN last_attempt_trace TEXT NULL;
ALTER TABLE outbox_attempts ADD COLUMN trace_context TEXT NULL;
