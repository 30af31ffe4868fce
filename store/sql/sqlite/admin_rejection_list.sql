-- outboxctl rejections: refused enqueues of the last ?1 milliseconds, newest first, of one
-- resource or all. Uses outbox_rejections_time_idx.
-- Parameters: ?1 age in ms, ?2 resource (NULL: all), ?3 how many at most.
SELECT id, resource, owner_id, fence, current_fence, destination, idempotency_key, stage,
       reason, rejected_at
FROM outbox_rejections
WHERE rejected_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?1 / 1000.0))
  AND (?2 IS NULL OR resource = ?2)
ORDER BY id DESC
LIMIT ?3
