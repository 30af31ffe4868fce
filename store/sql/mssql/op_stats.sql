-- Gauges for /metrics: pending ops (due or not), ops in flight, how long the oldest pending
-- op has waited since it was enqueued, in milliseconds (database clock, SYSUTCDATETIME(); the
-- pending op with the lowest sequence, ids being taken in enqueue order), and the enqueues
-- refused in the last hour (IX_outbox_rejections_time).
-- Parameters: none. Reads only the queue (unfinished ops, 0013_queue_layout.sql), never the
-- history, and the oldest pending op's request by its primary key. A plain read for gauges: a
-- statement snapshot under READ COMMITTED SNAPSHOT, short shared locks under READ COMMITTED;
-- nothing is decided from it.
-- Returns one row: pending bigint, in_flight bigint, oldest_pending_ms bigint (NULL when
-- nothing is pending), rejections_last_hour bigint.
SELECT (SELECT COUNT_BIG(*) FROM dbo.outbox_queue WHERE claimed_by_fence IS NULL) AS pending,
       (SELECT COUNT_BIG(*) FROM dbo.outbox_queue WHERE claimed_by_fence IS NOT NULL)
           AS in_flight,
       DATEDIFF_BIG(
           MILLISECOND,
           (SELECT r.created_at
            FROM dbo.outbox_requests AS r
            WHERE r.id = (SELECT MIN(q.id)
                          FROM dbo.outbox_queue AS q
                          WHERE q.claimed_by_fence IS NULL)),
           CAST(SYSUTCDATETIME() AS datetimeoffset(7))) AS oldest_pending_ms,
       (SELECT COUNT_BIG(*)
        FROM dbo.outbox_rejections
        WHERE rejected_at > DATEADD(HOUR, -1, CAST(SYSUTCDATETIME() AS datetimeoffset(7))))
           AS rejections_last_hour;
