-- Destinations that have pending ops (unclaimed queue rows, 0013_queue_layout.sql) but are
-- not configured, with how many: these ops are kept, never claimed, and reported until the
-- destination is configured. At most @P2 names, the most waiting first: names come from
-- producers, so the report stays bounded.
-- Destinations are compared in the column's binary collation (COLLATE), never clashing with
-- OPENJSON's. A plain read for a report: a statement snapshot under READ COMMITTED SNAPSHOT,
-- short shared locks under READ COMMITTED.
-- Parameters: @P1 configured destinations (nvarchar, a JSON array of strings), @P2 how many
-- names at most (bigint).
-- Returns destination (varchar), pending (bigint), one row per unconfigured destination.
SELECT TOP (@P2) destination, COUNT_BIG(*) AS pending
FROM dbo.outbox_queue
WHERE claimed_by_fence IS NULL
  AND destination NOT IN (
        SELECT CAST(j.value AS varchar(64)) COLLATE Latin1_General_100_BIN2
        FROM OPENJSON(@P1) AS j)
GROUP BY destination
ORDER BY pending DESC, destination;
