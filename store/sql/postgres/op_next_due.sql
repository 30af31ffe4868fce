-- Milliseconds until the next pending op of this partition is due (0 or less: due now), so
-- the drain loop can sleep exactly that long. NULL when nothing is pending.
-- Parameters: $1 partition count, $2 partition index, $3 configured destinations (text[]).
SELECT (extract(epoch FROM (min(next_attempt_at) - clock_timestamp())) * 1000)::bigint AS due_in_ms
FROM outbox_ops
WHERE state = 'pending'
  AND partition % $1 = $2
  AND destination = ANY($3::text[])
