-- Retention of the charts' rows: delete the minutes before $1 (two days ago), of both
-- tables, in one statement.
-- Parameters: $1 the oldest minute kept.
WITH stats AS (DELETE FROM outbox_minute_stats WHERE minute < $1 RETURNING 1),
     backlog AS (DELETE FROM outbox_backlog_minute WHERE minute < $1 RETURNING 1)
SELECT (SELECT count(*) FROM stats) + (SELECT count(*) FROM backlog) AS deleted
