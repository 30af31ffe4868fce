-- A dispatcher process says it is alive, on the database clock (see the postgres twin). An
-- upsert in one MERGE WITH (HOLDLOCK), as wakeup_set.sql.
-- Parameters: @P1 instance id (uniqueidentifier), @P2 host, @P3 pid (bigint), @P4 ttl in
-- milliseconds (bigint), @P5 partitions (int), @P6 led (int).
-- Returns nothing.
MERGE INTO dbo.outbox_dispatchers WITH (HOLDLOCK) AS d
USING (SELECT @P1 AS instance_id, @P2 AS host, @P3 AS pid, @P4 AS ttl_ms, @P5 AS partitions,
              @P6 AS led) AS s
    ON d.instance_id = s.instance_id
WHEN MATCHED THEN
    UPDATE SET heartbeat_at = CAST(SYSUTCDATETIME() AS datetimeoffset(7)),
               ttl_ms = s.ttl_ms,
               partitions = s.partitions,
               led = s.led
WHEN NOT MATCHED THEN
    INSERT (instance_id, host, pid, ttl_ms, partitions, led)
    VALUES (s.instance_id, s.host, s.pid, s.ttl_ms, s.partitions, s.led);
