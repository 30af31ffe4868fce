-- outboxctl status, by the database clock: the oldest pending op's age in milliseconds, ops
-- due now, ops that died in the last 24 hours and stale enqueues refused in the last hour.
-- Parameters: none. Uses outbox_ops_due_idx (pending), outbox_ops_attention_idx (dead) and
-- outbox_rejections_time_idx.
SELECT (SELECT (extract(epoch FROM clock_timestamp() - min(created_at)) * 1000)::bigint
        FROM outbox_ops
        WHERE state = 'pending') AS oldest_pending_ms,
       (SELECT count(*)
        FROM outbox_ops
        WHERE state = 'pending' AND next_attempt_at <= clock_timestamp()) AS due_now,
       (SELECT count(*)
        FROM outbox_ops
        WHERE state = 'dead' AND finished_at > clock_timestamp() - interval '24 hours')
           AS dead_last_day,
       (SELECT count(*)
        FROM outbox_rejections
        WHERE rejected_at > clock_timestamp() - interval '1 hour') AS rejections_last_hour
