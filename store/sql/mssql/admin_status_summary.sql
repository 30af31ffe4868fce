-- outboxctl status, by the database clock (SYSUTCDATETIME(), read once): the oldest pending
-- op's age in milliseconds, ops due now, ops that died in the last 24 hours and stale
-- enqueues refused in the last hour. The oldest pending op is the one with the lowest
-- sequence (ids are taken in enqueue order).
-- Parameters: none. Reads the queue (unfinished ops only, 0013_queue_layout.sql), the oldest
-- pending op's request by its primary key, IX_outbox_finished_attention (dead: the first
-- state term repeats its predicate word for word) and IX_outbox_rejections_time. A plain read for operators: a statement snapshot under READ
-- COMMITTED SNAPSHOT, short shared locks under READ COMMITTED; nothing is decided from it.
-- Returns one row: oldest_pending_ms bigint (NULL when nothing is pending), due_now bigint,
-- dead_last_day bigint, rejections_last_hour bigint.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

SELECT DATEDIFF_BIG(
           MILLISECOND,
           (SELECT r.created_at
            FROM dbo.outbox_requests AS r
            WHERE r.id = (SELECT MIN(q.id)
                          FROM dbo.outbox_queue AS q
                          WHERE q.claimed_by_fence IS NULL)),
           @now) AS oldest_pending_ms,
       (SELECT COUNT_BIG(*)
        FROM dbo.outbox_queue
        WHERE claimed_by_fence IS NULL AND next_attempt_at <= @now) AS due_now,
       (SELECT COUNT_BIG(*)
        FROM dbo.outbox_finished
        WHERE state IN ('dead', 'cancelled', 'superseded')
          AND state = 'dead'
          AND finished_at > DATEADD(HOUR, -24, @now)) AS dead_last_day,
       (SELECT COUNT_BIG(*)
        FROM dbo.outbox_rejections
        WHERE rejected_at > DATEADD(HOUR, -1, @now)) AS rejections_last_hour;
