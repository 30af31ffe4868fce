-- The newest refused enqueues first. A plain read for operators (a statement snapshot under
-- READ COMMITTED SNAPSHOT, short shared locks under READ COMMITTED).
-- Parameters: @P1 how many at most.
-- Returns id, resource, owner_id, fence, current_fence, destination, idempotency_key, stage,
-- reason, rejected_at.
SELECT TOP (@P1) id, resource, owner_id, fence, current_fence, destination, idempotency_key,
       stage, reason, rejected_at
FROM dbo.outbox_rejections
ORDER BY id DESC;
