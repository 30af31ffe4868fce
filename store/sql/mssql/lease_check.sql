-- The lease row of a resource, read inside the enqueue's transaction (before a batch insert,
-- or after an insert that inserted nothing, to tell why) (G4).
-- WITH (HOLDLOCK, ROWLOCK) makes it a locking read under READ COMMITTED and READ COMMITTED
-- SNAPSHOT alike (under RCSI a plain read takes no lock and reads a version): a shared lock
-- on the row's key, or on the key range when the resource was never leased, held to the end
-- of the transaction. A takeover's UPDATE of the row (or a first acquisition's INSERT into
-- the range) waits for it, so what this read saw stays true until the transaction commits.
-- Parameters: @P1 resource.
-- Returns (owner_id uniqueidentifier, fence bigint, live bit) or no row.
SELECT owner_id,
       fence,
       CAST(CASE WHEN expires_at > CAST(SYSUTCDATETIME() AS datetimeoffset(7)) THEN 1 ELSE 0 END
            AS bit) AS live
FROM dbo.outbox_leases WITH (HOLDLOCK, ROWLOCK)
WHERE resource = @P1;
