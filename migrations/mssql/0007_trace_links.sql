-- 0007_trace_links: the producer's tracestate, and the traceparent of each attempt's span on
-- the attempt and (the latest) on the op (see migrations/postgres/0007_trace_links.sql).
-- A traceparent is 55 ASCII characters; a tracestate at most 512 (W3C Trace Context).
-- One column per ADD, as Babelfish for PostgreSQL requires.
ALTER TABLE dbo.outbox_ops ADD trace_state varchar(512) NULL;
ALTER TABLE dbo.outbox_ops ADD last_attempt_trace varchar(55) NULL;
ALTER TABLE dbo.outbox_attempts ADD trace_context varchar(55) NULL;
