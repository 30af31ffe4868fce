-- Every lease row, with whether it is held now and for how long, by the database clock (G2).
-- A plain read for operators: a snapshot under READ COMMITTED SNAPSHOT, short shared locks
-- under READ COMMITTED; nothing decides ownership from it.
-- Parameters: none.
-- Returns resource, owner_id, fence, expires_at, partitions, held (bit), remaining_ms (bigint,
-- NULL when the row has no expiry, negative once expired).
SELECT resource,
       owner_id,
       fence,
       expires_at,
       partitions,
       CAST(CASE
                WHEN owner_id IS NOT NULL
                     AND expires_at > CAST(SYSUTCDATETIME() AS datetimeoffset(7)) THEN 1
                ELSE 0
            END AS bit) AS held,
       DATEDIFF_BIG(MILLISECOND, CAST(SYSUTCDATETIME() AS datetimeoffset(7)), expires_at)
           AS remaining_ms
FROM dbo.outbox_leases
ORDER BY resource;
