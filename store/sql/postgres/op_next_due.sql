-- Milliseconds until the next pending op of this partition is due (0 or less: due now), so
-- the drain loop can sleep exactly that long. NULL when nothing is pending.
-- A held destination's ops (paused, or its breaker among $4 not closed) are left out, as the
-- claim leaves them: they are not due for this loop until the hold ends, which wakes it.
-- Parameters: $1 partition count, $2 partition index, $3 configured destinations (text[]),
-- $4 those of them with a breaker (text[]).
SELECT (extract(epoch FROM (min(next_attempt_at) - clock_timestamp())) * 1000)::bigint AS due_in_ms
FROM outbox_queue
WHERE claimed_by_fence IS NULL
  AND partition % $1 = $2
  AND destination = ANY($3::text[])
  AND destination <> ALL(ARRAY(
        SELECT d.destination FROM outbox_destinations d
        WHERE d.paused_at IS NOT NULL
           OR (d.state <> 'closed' AND d.destination = ANY($4::text[]))))
