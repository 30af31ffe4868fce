-- The newest refused enqueues first.
-- Parameters: $1 how many at most.
SELECT id, resource, owner_id, fence, current_fence, destination, idempotency_key, stage,
       reason, rejected_at
FROM outbox_rejections
ORDER BY id DESC
LIMIT $1
