-- outboxctl status, by the database clock: the oldest pending op's age in milliseconds, ops
-- due now, ops that died in the last 24 hours and stale enqueues refused in the last hour.
-- The oldest pending op is the one with the lowest sequence (ids are taken in enqueue order).
-- Parameters: none. Reads the queue (unfinished ops only), outbox_finished_attention_idx
-- (dead; its predicate repeated word for word) and outbox_rejections_time_idx.
SELECT (SELECT CAST((julianday('now') - julianday(r.created_at)) * 86400000 AS INTEGER)
        FROM outbox_requests r
        WHERE r.id = (SELECT min(id) FROM outbox_queue WHERE claimed_by_fence IS NULL))
           AS oldest_pending_ms,
       (SELECT count(*)
        FROM outbox_queue
        WHERE claimed_by_fence IS NULL
          AND next_attempt_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) AS due_now,
       (SELECT count(*)
        FROM outbox_finished
        WHERE state IN ('dead', 'cancelled', 'superseded')
          AND state = 'dead'
          AND finished_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-24 hours')) AS dead_last_day,
       (SELECT count(*)
        FROM outbox_rejections
        WHERE rejected_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour'))
           AS rejections_last_hour
