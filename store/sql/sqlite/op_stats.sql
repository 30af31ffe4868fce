-- Gauges for /metrics: pending ops (due or not), ops in flight, how long the oldest pending
-- op has waited since it was enqueued, in milliseconds (database clock; the pending op with
-- the lowest sequence), and the enqueues refused in the last hour (outbox_rejections_time_idx).
-- Parameters: none. Reads only the queue (unfinished ops).
SELECT count(*) FILTER (WHERE claimed_by_fence IS NULL) AS pending,
       count(*) FILTER (WHERE claimed_by_fence IS NOT NULL) AS in_flight,
       (SELECT CAST(round((julianday('now') - julianday(r.created_at)) * 86400000.0) AS INTEGER)
        FROM outbox_requests r
        WHERE r.id = (SELECT min(p.id) FROM outbox_queue p WHERE p.claimed_by_fence IS NULL))
           AS oldest_pending_ms,
       (SELECT count(*)
        FROM outbox_rejections
        WHERE rejected_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour'))
           AS rejections_last_hour
FROM outbox_queue q
