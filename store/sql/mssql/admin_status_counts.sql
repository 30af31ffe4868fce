-- outboxctl status: how many ops each state holds, per destination: unfinished ones from the
-- queue, finished ones with their request's destination (0013_queue_layout.sql).
-- Parameters: none. Reads the whole tables: run by hand, not polled. A plain read for
-- operators: a statement snapshot under READ COMMITTED SNAPSHOT, short shared locks under
-- READ COMMITTED; the two halves may see an op that finishes meanwhile in neither or (under
-- locking READ COMMITTED) in both, as any count that is not a snapshot may.
-- Returns state (varchar), destination (varchar), ops (bigint), by state then destination.
SELECT c.state, c.destination, c.ops
FROM (
    SELECT CAST(CASE WHEN q.claimed_by_fence IS NULL THEN 'pending' ELSE 'in_flight' END
                AS varchar(16)) AS state,
           q.destination,
           COUNT_BIG(*) AS ops
    FROM dbo.outbox_queue AS q
    GROUP BY CASE WHEN q.claimed_by_fence IS NULL THEN 'pending' ELSE 'in_flight' END,
             q.destination
    UNION ALL
    SELECT f.state, r.destination, COUNT_BIG(*) AS ops
    FROM dbo.outbox_finished AS f
    INNER JOIN dbo.outbox_requests AS r ON r.id = f.id
    GROUP BY f.state, r.destination
) AS c
ORDER BY c.state, c.destination;
