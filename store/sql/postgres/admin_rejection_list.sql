-- outboxctl rejections: refused enqueues of the last $1 milliseconds, newest first, of one
-- resource or all. Uses outbox_rejections_resource_idx or outbox_rejections_time_idx.
-- Parameters: $1 age in ms, $2 resource (NULL: all), $3 how many at most.
SELECT id, resource, owner_id, fence, current_fence, destination, idempotency_key, stage,
       reason, rejected_at
FROM outbox_rejections
WHERE rejected_at > clock_timestamp() - $1::bigint * interval '1 millisecond'
  AND ($2::text IS NULL OR resource = $2)
ORDER BY id DESC
LIMIT $3
