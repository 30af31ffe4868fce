-- Retention of the charts' per-destination rows: delete the minutes before ?1 (two days ago).
-- backlog_minute_purge.sql does the same for the backlog's samples.
-- Parameters: ?1 the oldest minute kept.
DELETE FROM outbox_minute_stats WHERE minute < ?1
