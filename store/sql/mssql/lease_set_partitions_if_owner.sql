-- A dispatcher that took a partition lease records the partition count it serves, so that a
-- dispatcher configured with another count sees it and refuses to serve (G12). Only while
-- this owner and token hold the lease: the UPDATE checks them on the current row with an
-- update lock, under READ COMMITTED and READ COMMITTED SNAPSHOT alike.
-- Parameters: @P1 partition lease resource, @P2 owner id, @P3 token, @P4 partition count.
-- Returns one row: affected (bigint), 1 when recorded, 0 otherwise.
SET NOCOUNT ON;

UPDATE dbo.outbox_leases
SET partitions = @P4
WHERE resource = @P1 AND owner_id = @P2 AND fence = @P3;

SELECT CAST(@@ROWCOUNT AS bigint) AS affected;
