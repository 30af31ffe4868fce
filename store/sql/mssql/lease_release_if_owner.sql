-- Release a lease; the fence is kept so the next owner gets a larger token (G1).
-- G3: needs the same owner id and token, so an old owner cannot release a newer lease. The
-- UPDATE finds its row with an update lock and checks the current row, under READ COMMITTED
-- and READ COMMITTED SNAPSHOT alike.
-- Parameters: @P1 resource, @P2 owner id, @P3 token.
-- Returns one row: affected (bigint), 1 when released, 0 otherwise.
SET NOCOUNT ON;

UPDATE dbo.outbox_leases
SET owner_id = NULL,
    expires_at = NULL
WHERE resource = @P1
  AND owner_id = @P2
  AND fence = @P3;

SELECT CAST(@@ROWCOUNT AS bigint) AS affected;
