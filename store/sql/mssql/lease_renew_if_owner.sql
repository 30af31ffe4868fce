-- Extend a lease that this owner still holds; the token stays the same.
-- G3: needs the same owner id and token and an unexpired lease (database clock,
-- SYSUTCDATETIME()), so an expired generation is never revived and an old owner cannot extend
-- a newer one. One statement: under READ COMMITTED and READ COMMITTED SNAPSHOT alike, an
-- UPDATE finds its row with an update lock and checks the condition on the current row, so a
-- takeover is either waited for and then seen, or waits for this renewal.
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 ttl in milliseconds.
-- Returns one row (expires_at datetimeoffset) when renewed, none otherwise.
UPDATE dbo.outbox_leases
SET expires_at = DATEADD(MILLISECOND, CAST(@P4 AS int), CAST(SYSUTCDATETIME() AS datetimeoffset(7)))
OUTPUT inserted.expires_at
WHERE resource = @P1
  AND owner_id = @P2
  AND fence = @P3
  AND expires_at > CAST(SYSUTCDATETIME() AS datetimeoffset(7));
