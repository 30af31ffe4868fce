-- outboxctl list --key K without --destination: the destinations in use, read from
-- outbox_requests' UQ_outbox_ops_destination_key one value at a time (a loose index scan: one
-- probe per destination, not a read of the table), so the key is then looked up per destination in that
-- index. A recursive CTE may not aggregate in its recursive member, so each step takes the
-- next destination as the first row (ROW_NUMBER() = 1, a TOP (1) seek in the plan) above the
-- one before; MAXRECURSION 0: there may be more than 100 destinations. Destinations compare
-- in the column's binary collation, as PostgreSQL compares text.
-- A plain read for operators (a statement snapshot under READ COMMITTED SNAPSHOT, short shared
-- locks under READ COMMITTED): a destination first used meanwhile may be missing.
-- Parameters: none.
-- Returns destination (varchar), one row per destination in use, in order.
WITH d (destination) AS (
    SELECT MIN(o.destination)
    FROM dbo.outbox_requests AS o
    UNION ALL
    SELECT n.destination
    FROM (
        SELECT o.destination,
               ROW_NUMBER() OVER (ORDER BY o.destination) AS rn
        FROM dbo.outbox_requests AS o
        INNER JOIN d ON o.destination > d.destination
    ) AS n
    WHERE n.rn = 1
)
SELECT destination
FROM d
WHERE destination IS NOT NULL
OPTION (MAXRECURSION 0);
