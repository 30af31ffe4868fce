-- Acquire the lease on a resource when it is free, released or expired, in one batch with its
-- own transaction (the seed's TryAcquireResourceLease).
-- G1: the token is the row's fence + 1, allocated atomically with the grant. The row is created
-- on first use (fence 0, no owner) and never deleted, so the fence survives release and expiry.
-- The existence check reads WITH (UPDLOCK, HOLDLOCK): a key-range update lock on the primary
-- key, held to the commit, even where the row does not exist yet. Update locks exclude each
-- other, so concurrent first acquisitions of one resource queue on that range: the first
-- inserts the row and takes the lease, the next ones find the row held and get no row.
-- G2: "expired" is decided with SYSUTCDATETIME(), the database clock; @now is read before any
-- lock wait, so a late grant only gets a shorter lease, never a longer one.
-- Locking is the same under READ COMMITTED and READ COMMITTED SNAPSHOT: UPDLOCK/HOLDLOCK is a
-- locking read of the latest committed row (never a row version), and an UPDATE always finds
-- its rows with update locks and checks them on the current row.
-- Parameters: @P1 resource, @P2 new owner id, @P3 ttl in milliseconds.
-- Returns one row (fence bigint, expires_at datetimeoffset) when acquired, none when the lease
-- is held.
SET NOCOUNT ON;

BEGIN TRANSACTION;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();

IF NOT EXISTS (
    SELECT 1
    FROM dbo.outbox_leases WITH (UPDLOCK, HOLDLOCK)
    WHERE resource = @P1
)
BEGIN
    INSERT INTO dbo.outbox_leases (resource, owner_id, expires_at, fence)
    VALUES (@P1, NULL, NULL, 0);
END;

UPDATE dbo.outbox_leases
SET owner_id = @P2,
    expires_at = DATEADD(MILLISECOND, CAST(@P3 AS int), @now),
    fence = fence + 1
OUTPUT inserted.fence, inserted.expires_at
WHERE resource = @P1
  AND (owner_id IS NULL OR expires_at <= @now);

COMMIT TRANSACTION;
