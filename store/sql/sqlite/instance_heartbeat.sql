-- A dispatcher process says it is alive, on the database clock (see the postgres twin).
-- Parameters: ?1 instance id, ?2 host, ?3 pid, ?4 ttl in milliseconds, ?5 partitions, ?6 led.
INSERT INTO outbox_dispatchers (instance_id, host, pid, ttl_ms, partitions, led)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (instance_id) DO UPDATE
    SET heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
        ttl_ms = excluded.ttl_ms,
        partitions = excluded.partitions,
        led = excluded.led
