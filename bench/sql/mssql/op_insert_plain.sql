-- Baseline: the same rows as the fenced enqueue (the request and its queue row,
-- 0013_queue_layout.sql), inserted with no lease check and no idempotency-key probe, in one
-- transaction. Parameters as op_insert_if_lease_held.sql without the lease and the columns the
-- workload leaves at their defaults: @P1 resource, @P2 owner id, @P3 token, @P4 op id,
-- @P5 destination, @P6 idempotency key, @P7 request hash, @P8 order key, @P9 partition,
-- @P10 method, @P11 path, @P12 headers, @P13 content type, @P14 body.
SET NOCOUNT ON;

DECLARE @request TABLE (id bigint NOT NULL PRIMARY KEY);

BEGIN TRANSACTION;

INSERT INTO dbo.outbox_requests (op_id, resource, fence, owner_id, destination,
                                 idempotency_key, request_hash, order_key, partition, method,
                                 path, headers, content_type, body)
OUTPUT inserted.id INTO @request (id)
VALUES (@P4, @P1, @P3, @P2, @P5, @P6, @P7, @P8, @P9, @P10, @P11, @P12, @P13, @P14);

INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation)
SELECT r.id, SYSUTCDATETIME(), @P9, @P5, @P3, @P8, 0
FROM @request AS r;

COMMIT TRANSACTION;
