-- Gauges for /metrics: pending ops (due or not), ops in flight, how long the oldest pending
-- op has waited since it was enqueued, in milliseconds (database clock; the pending op with
-- the lowest sequence), and the enqueues refused in the last hour (outbox_rejections_time_idx).
-- Parameters: none. Reads only the queue (unfinished ops).
SELECT count(*) FILTER (WHERE claimed_by_fence IS NULL) AS pending,
       count(*) FILTER (WHERE claimed_by_fence IS NOT NULL) AS in_flight,
       (SELECT (extract(epoch FROM (clock_timestamp() - r.created_at)) * 1000)::bigint
        FROM outbox_requests r
        WHERE r.id = min(q.id) FILTER (WHERE q.claimed_by_fence IS NULL)) AS oldest_pending_ms,
       (SELECT count(*)
        FROM outbox_rejections
        WHERE rejected_at > clock_timestamp() - interval '1 hour') AS rejections_last_hour
FROM outbox_queue q
