-- The op holding a (destination, idempotency key), to tell a duplicate from a conflict (G7).
-- Runs after an insert that skipped the key, in the same transaction: that insert's
-- (UPDLOCK, HOLDLOCK) probe still holds the key's lock, and the row it found was committed, so
-- a plain read sees it under READ COMMITTED and READ COMMITTED SNAPSHOT alike (the statement's
-- snapshot starts after the insert).
-- Parameters: @P1 destination, @P2 idempotency key.
-- Returns (id bigint, op_id uniqueidentifier, request_hash varbinary, state varchar) or no row.
SELECT id, op_id, request_hash, state
FROM dbo.outbox_ops
WHERE destination = CAST(@P1 AS varchar(64))
  AND idempotency_key = CAST(@P2 AS varchar(255));
