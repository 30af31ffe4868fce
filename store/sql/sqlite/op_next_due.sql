-- Milliseconds until the next pending op of this partition is due (0 or less: due now), so
-- the drain loop can sleep exactly that long. NULL when nothing is pending.
-- A held destination's ops (paused, or its breaker among ?4 not closed) are left out, as the
-- claim leaves them: they are not due for this loop until the hold ends, which wakes it.
-- Parameters: ?1 partition count, ?2 partition index, ?3 configured destinations (JSON array),
-- ?4 those of them with a breaker (JSON array).
-- The first match in the queue's due index is the earliest (an aggregate would read them all);
-- in-flight rows are skipped by the claim check.
SELECT (SELECT CAST(round((julianday(next_attempt_at) - julianday('now')) * 86400000.0) AS INTEGER)
        FROM outbox_queue INDEXED BY outbox_queue_due_idx
        WHERE claimed_by_fence IS NULL
          AND partition % ?1 = ?2
          AND destination IN (SELECT value FROM json_each(?3))
          AND destination NOT IN (
                SELECT d.destination FROM outbox_destinations AS d
                WHERE d.paused_at IS NOT NULL
                   OR (d.state <> 'closed' AND d.destination IN (SELECT value FROM json_each(?4))))
        ORDER BY next_attempt_at, id
        LIMIT 1) AS due_in_ms
