-- Destinations that have pending ops but are not configured, with how many: these ops are
-- kept, never claimed, and reported until the destination is configured. At most ?2 names,
-- the most waiting first: names come from producers, so the report stays bounded.
-- Parameters: ?1 configured destinations (JSON array), ?2 how many names at most.
SELECT destination, count(*) AS pending
FROM outbox_queue
WHERE claimed_by_fence IS NULL
  AND destination NOT IN (SELECT value FROM json_each(?1))
GROUP BY destination
ORDER BY pending DESC, destination
LIMIT ?2
