-- outboxctl status, by the database clock: the oldest pending op's age in milliseconds, ops
-- due now, ops that died in the last 24 hours and stale enqueues refused in the last hour.
-- Parameters: none. Uses outbox_ops_due_idx (pending), outbox_ops_attention_idx (dead) and
-- outbox_rejections_time_idx.
SELECT (SELECT CAST((julianday('now') - julianday(min(created_at))) * 86400000 AS INTEGER)
        FROM outbox_ops
        WHERE state = 'pending') AS oldest_pending_ms,
       (SELECT count(*)
        FROM outbox_ops
        WHERE state = 'pending'
          AND next_attempt_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) AS due_now,
       (SELECT count(*)
        FROM outbox_ops
        WHERE state IN ('dead', 'cancelled', 'superseded')
          AND state = 'dead'
          AND finished_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-24 hours')) AS dead_last_day,
       (SELECT count(*)
        FROM outbox_rejections
        WHERE rejected_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour'))
           AS rejections_last_hour
