-- Every registered dispatcher process, with whether its heartbeat still vouches for it and how
-- old that heartbeat is, by the database clock.
-- Parameters: none.
SELECT instance_id,
       host,
       pid,
       started_at,
       partitions,
       led,
       (heartbeat_at + ttl_ms * interval '1 millisecond' > clock_timestamp()) AS live,
       (extract(epoch FROM (clock_timestamp() - heartbeat_at)) * 1000)::bigint AS heartbeat_age_ms
FROM outbox_dispatchers
ORDER BY instance_id
