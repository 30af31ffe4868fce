-- The op holding a (destination, idempotency key), to tell a duplicate from a conflict (G7).
-- Runs after an insert that skipped the key, in the same transaction: that insert's
-- (UPDLOCK, HOLDLOCK) probe still holds the key's lock, and the request it found was
-- committed, so a plain read sees it under READ COMMITTED and READ COMMITTED SNAPSHOT alike
-- (the statement's snapshot starts after the insert). The request is read by
-- UQ_outbox_ops_destination_key, its state from its queue row or else its finished row
-- (0013_queue_layout.sql). Under locking READ COMMITTED an op that moves between the two at
-- that instant (a replay, a completion) may be read in neither: it is then said to be in
-- flight, as admin_op_lock.sql says, never not found (which would ask for a retry).
-- Parameters: @P1 destination, @P2 idempotency key.
-- Returns (id bigint, op_id uniqueidentifier, request_hash varbinary, state varchar) or no row.
SELECT r.id,
       r.op_id,
       r.request_hash,
       CAST(COALESCE(
                (SELECT CASE WHEN q.claimed_by_fence IS NULL THEN 'pending' ELSE 'in_flight' END
                 FROM dbo.outbox_queue AS q
                 WHERE q.id = r.id),
                (SELECT f.state FROM dbo.outbox_finished AS f WHERE f.id = r.id),
                'in_flight') AS varchar(16)) AS state
FROM dbo.outbox_requests AS r
WHERE r.destination = CAST(@P1 AS varchar(64))
  AND r.idempotency_key = CAST(@P2 AS varchar(255));
