-- Milliseconds until the next pending op of this partition is due (0 or less: due now), so
-- the drain loop can sleep exactly that long. NULL when nothing is pending.
-- Parameters: ?1 partition count, ?2 partition index, ?3 configured destinations (JSON array).
SELECT CAST(round((julianday(min(next_attempt_at)) - julianday('now')) * 86400000.0) AS INTEGER) AS due_in_ms
FROM outbox_ops
WHERE state = 'pending'
  AND partition % ?1 = ?2
  AND destination IN (SELECT value FROM json_each(?3))
