-- The holds that ended after @P1 (the longest max_age ago): what the dispatchers subtract from
-- an op's age. At most 10000, the latest.
-- Parameters: @P1 since (ISO 8601 text with an offset).
-- Returns: destination varchar, held_from datetimeoffset, held_until datetimeoffset.
SELECT TOP (10000) destination, held_from, held_until
FROM dbo.outbox_destination_holds
WHERE held_until > CAST(@P1 AS datetimeoffset(7))
ORDER BY held_until DESC;
