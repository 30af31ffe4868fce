-- outboxctl status, by the database clock (SYSUTCDATETIME(), read once): the oldest pending
-- op's age in milliseconds, ops due now, ops that died in the last 24 hours and stale
-- enqueues refused in the last hour.
-- Parameters: none. Each subquery reads one filtered index: IX_outbox_ops_due (pending),
-- IX_outbox_ops_finished (dead, by finish time) and IX_outbox_rejections_time. A plain read
-- for operators: a statement snapshot under READ COMMITTED SNAPSHOT, short shared locks under
-- READ COMMITTED; nothing is decided from it.
-- Returns one row: oldest_pending_ms bigint (NULL when nothing is pending), due_now bigint,
-- dead_last_day bigint, rejections_last_hour bigint.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

SELECT DATEDIFF_BIG(
           MILLISECOND,
           (SELECT MIN(created_at) FROM dbo.outbox_ops WHERE state = 'pending'),
           @now) AS oldest_pending_ms,
       (SELECT COUNT_BIG(*)
        FROM dbo.outbox_ops
        WHERE state = 'pending' AND next_attempt_at <= @now) AS due_now,
       (SELECT COUNT_BIG(*)
        FROM dbo.outbox_ops
        WHERE state IN ('delivered', 'dead', 'cancelled', 'superseded')
          AND state = 'dead'
          AND finished_at > DATEADD(HOUR, -24, @now)) AS dead_last_day,
       (SELECT COUNT_BIG(*)
        FROM dbo.outbox_rejections
        WHERE rejected_at > DATEADD(HOUR, -1, @now)) AS rejections_last_hour;
