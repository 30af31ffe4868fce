-- A dispatcher process leaves on graceful shutdown, or forgets processes gone for long.
-- Parameters: $1 instance id (NULL: none), $2 milliseconds past its ttl after which a silent
-- process's row is deleted.
DELETE FROM outbox_dispatchers
WHERE instance_id = $1
   OR heartbeat_at + (ttl_ms + $2::bigint) * interval '1 millisecond' < clock_timestamp()
