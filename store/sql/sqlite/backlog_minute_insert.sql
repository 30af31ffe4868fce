-- One dispatcher's sample of the outbox's backlog for one minute that ended. Written once.
-- Parameters: ?1 minute, ?2 instance id, ?3 pending, ?4 in flight, ?5 oldest pending age (ms).
INSERT INTO outbox_backlog_minute (minute, instance_id, pending, in_flight, oldest_pending_ms)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (minute, instance_id) DO NOTHING
