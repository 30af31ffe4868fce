-- The holds that ended after $1 (the longest max_age ago): what the dispatchers subtract from
-- an op's age. At most 10000, the latest.
-- Parameters: $1 since.
SELECT destination, held_from, held_until
FROM outbox_destination_holds
WHERE held_until > $1
ORDER BY held_until DESC
LIMIT 10000
