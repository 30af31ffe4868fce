-- Destinations that have pending ops but are not configured, with how many: these ops are
-- kept, never claimed, and reported until the destination is configured.
-- Parameters: $1 configured destinations (text[]).
SELECT destination, count(*) AS pending
FROM outbox_ops
WHERE state = 'pending'
  AND NOT (destination = ANY($1::text[]))
GROUP BY destination
ORDER BY destination
