-- Live partition leases whose holder serves another partition count than ours: while one
-- exists, a dispatcher with our count must not serve (G12). Looked up by name (one primary
-- key probe per partition lease name), never by scanning every lease. The names are compared
-- in the column's binary collation (COLLATE), as PostgreSQL compares text, and never clash
-- with OPENJSON's output collation. A plain read: the latest committed rows (a statement
-- snapshot under READ COMMITTED SNAPSHOT); the check is repeated every cycle.
-- Parameters: @P1 every partition lease name (a JSON array of strings), @P2 our partition count.
-- Returns resource (nvarchar), partitions (int) of each conflicting lease.
SELECT resource, partitions
FROM dbo.outbox_leases
WHERE resource IN (
        SELECT CAST(j.value AS nvarchar(400)) COLLATE Latin1_General_100_BIN2
        FROM OPENJSON(@P1) AS j
    )
  AND owner_id IS NOT NULL
  AND expires_at > CAST(SYSUTCDATETIME() AS datetimeoffset(7))
  AND partitions IS NOT NULL
  AND partitions <> @P2
ORDER BY resource;
