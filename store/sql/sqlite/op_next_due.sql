-- Milliseconds until the next pending op of this partition is due (0 or less: due now), so
-- the drain loop can sleep exactly that long. NULL when nothing is pending.
-- Parameters: ?1 partition count, ?2 partition index, ?3 configured destinations (JSON array).
-- The first match in the partial due index is the earliest (an aggregate would read them all).
SELECT (SELECT CAST(round((julianday(next_attempt_at) - julianday('now')) * 86400000.0) AS INTEGER)
        FROM outbox_ops INDEXED BY outbox_ops_due_idx
        WHERE state = 'pending'
          AND partition % ?1 = ?2
          AND destination IN (SELECT value FROM json_each(?3))
        ORDER BY next_attempt_at, id
        LIMIT 1) AS due_in_ms
