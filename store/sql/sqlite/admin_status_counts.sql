-- outboxctl status: how many ops each state holds, per destination: unfinished ones from the
-- queue, finished ones with their request's destination.
-- Parameters: none. Reads the whole tables: run by hand, not polled.
SELECT state, destination, ops
FROM (
    SELECT CASE WHEN claimed_by_fence IS NULL THEN 'pending' ELSE 'in_flight' END AS state,
           destination, count(*) AS ops
    FROM outbox_queue
    GROUP BY 1, 2
    UNION ALL
    SELECT f.state, r.destination, count(*) AS ops
    FROM outbox_finished f
    JOIN outbox_requests r ON r.id = f.id
    GROUP BY 1, 2
) AS counts
ORDER BY state, destination
