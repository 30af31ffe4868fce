-- Gauges for /metrics: pending ops (due or not), ops in flight, how long the oldest pending
-- op has waited since it was enqueued, in milliseconds (database clock), and the enqueues
-- refused in the last hour (outbox_rejections_time_idx).
-- Parameters: none. Reads only the partial indexes' rows (non-terminal states).
SELECT count(*) FILTER (WHERE state = 'pending') AS pending,
       count(*) FILTER (WHERE state = 'in_flight') AS in_flight,
       (extract(epoch FROM (clock_timestamp() - min(created_at) FILTER (WHERE state = 'pending'))) * 1000)::bigint
           AS oldest_pending_ms,
       (SELECT count(*)
        FROM outbox_rejections
        WHERE rejected_at > clock_timestamp() - interval '1 hour') AS rejections_last_hour
FROM outbox_ops
WHERE state IN ('pending', 'in_flight')
