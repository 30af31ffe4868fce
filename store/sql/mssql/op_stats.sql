-- Gauges for /metrics: pending ops (due or not), ops in flight, how long the oldest pending
-- op has waited since it was enqueued, in milliseconds (database clock, SYSUTCDATETIME()),
-- and the enqueues refused in the last hour (IX_outbox_rejections_time).
-- Parameters: none. Each subquery reads only the rows of one non-terminal state, found in
-- a filtered index (IX_outbox_ops_due for pending, IX_outbox_ops_in_flight for in flight),
-- never the history. A plain read for gauges: a statement snapshot under READ COMMITTED
-- SNAPSHOT, short shared locks under READ COMMITTED; nothing is decided from it.
-- Returns one row: pending bigint, in_flight bigint, oldest_pending_ms bigint (NULL when
-- nothing is pending), rejections_last_hour bigint.
SELECT (SELECT COUNT_BIG(*) FROM dbo.outbox_ops WHERE state = 'pending') AS pending,
       (SELECT COUNT_BIG(*) FROM dbo.outbox_ops WHERE state = 'in_flight') AS in_flight,
       DATEDIFF_BIG(
           MILLISECOND,
           (SELECT MIN(created_at) FROM dbo.outbox_ops WHERE state = 'pending'),
           CAST(SYSUTCDATETIME() AS datetimeoffset(7))) AS oldest_pending_ms,
       (SELECT COUNT_BIG(*)
        FROM dbo.outbox_rejections
        WHERE rejected_at > DATEADD(HOUR, -1, CAST(SYSUTCDATETIME() AS datetimeoffset(7))))
           AS rejections_last_hour;
