-- Every registered dispatcher process, with whether its heartbeat still vouches for it and how
-- old that heartbeat is, by the database clock. A plain read for operators.
-- Parameters: none.
-- Returns instance_id, host, pid, started_at, partitions, led, live (bit), heartbeat_age_ms.
SELECT instance_id,
       host,
       pid,
       started_at,
       partitions,
       led,
       CAST(CASE
                WHEN DATEDIFF_BIG(MILLISECOND, heartbeat_at, CAST(SYSUTCDATETIME() AS datetimeoffset(7)))
                     < ttl_ms THEN 1
                ELSE 0
            END AS bit) AS live,
       DATEDIFF_BIG(MILLISECOND, heartbeat_at, CAST(SYSUTCDATETIME() AS datetimeoffset(7)))
           AS heartbeat_age_ms
FROM dbo.outbox_dispatchers
ORDER BY instance_id;
