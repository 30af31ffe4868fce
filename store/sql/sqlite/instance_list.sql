-- Every registered dispatcher process, with whether its heartbeat still vouches for it and how
-- old that heartbeat is, by the database clock.
-- Parameters: none.
SELECT instance_id,
       host,
       pid,
       started_at,
       partitions,
       led,
       ((julianday('now') - julianday(heartbeat_at)) * 86400000.0 < ttl_ms) AS live,
       CAST(round((julianday('now') - julianday(heartbeat_at)) * 86400000.0) AS INTEGER)
           AS heartbeat_age_ms
FROM outbox_dispatchers
ORDER BY instance_id
