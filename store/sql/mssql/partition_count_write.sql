-- In `outboxctl partitions set`'s transaction: the new count in force, who and why, on the
-- database clock; an upsert in one MERGE WITH (HOLDLOCK), as wakeup_set.sql.
-- Parameters: @P1 partitions (int), @P2 changed_by (nvarchar), @P3 reason (nvarchar).
-- Returns nothing.
MERGE INTO dbo.outbox_partition_count WITH (HOLDLOCK) AS c
USING (SELECT @P1 AS partitions, @P2 AS changed_by, @P3 AS reason) AS s
    ON c.singleton = 1
WHEN MATCHED THEN
    UPDATE SET partitions = s.partitions,
               changed_at = CAST(SYSUTCDATETIME() AS datetimeoffset(7)),
               changed_by = s.changed_by,
               reason = s.reason
WHEN NOT MATCHED THEN
    INSERT (partitions, changed_by, reason)
    VALUES (s.partitions, s.changed_by, s.reason);
