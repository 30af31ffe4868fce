-- 0007_trace_links: the rest of an op's trace context. The producer's W3C tracestate travels
-- with its traceparent (the attempt span inherits it and the destination gets it); each
-- attempt keeps the traceparent of its span, and the op the latest one, so that a retry's span
-- links to the attempt before it and an operator can find any attempt in the tracing system.
-- All three are NULL while traces are off; none of them takes part in the request hash (G7).
ALTER TABLE outbox_ops ADD COLUMN trace_state text NULL;
ALTER TABLE outbox_ops ADD COLUMN last_attempt_trace text NULL;
ALTER TABLE outbox_ops ADD CONSTRAINT outbox_ops_trace_state_length
    CHECK (octet_length(trace_state) <= 512);
ALTER TABLE outbox_attempts ADD COLUMN trace_context text NULL;
