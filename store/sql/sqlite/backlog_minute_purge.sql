-- Retention of the backlog's samples: delete the minutes before ?1 (two days ago).
-- Parameters: ?1 the oldest minute kept.
DELETE FROM outbox_backlog_minute WHERE minute < ?1
