-- Give back a claim that was never attempted (the destination was full or rate limited, or
-- the lease window closed before sending): pending again, due now, its attempt not counted
-- (the queue row's claim cleared in place, as the claim set it; 0013_queue_layout.sql).
-- Only while this partition lease and token still hold the claim and the lease still has this
-- owner and token, as every completion checks (G9); a new leader's re-queue wins.
-- One autocommit statement: the lease row is read WITH (HOLDLOCK, ROWLOCK), a shared lock on
-- its key held until the statement commits and a locking read of the latest committed row
-- under READ COMMITTED and READ COMMITTED SNAPSHOT alike (under RCSI a plain read takes no
-- lock and reads a version), so no takeover commits under it; the UPDATE finds the op with an
-- update lock and checks it on the current row in both modes.
-- Parameters: @P1 partition lease resource (nvarchar), @P2 owner id (uniqueidentifier),
-- @P3 dispatcher token (bigint), @P4 op row id (bigint).
-- Returns one row: affected (bigint), 1 when given back, 0 otherwise.
SET NOCOUNT ON;

UPDATE dbo.outbox_queue
SET claimed_by_fence = NULL,
    claimed_by_lease = NULL,
    claimed_at = NULL,
    attempts = attempts - 1
WHERE id = @P4
  AND claimed_by_fence = @P3
  AND claimed_by_lease = @P1
  AND EXISTS (
        SELECT 1
        FROM dbo.outbox_leases AS l WITH (HOLDLOCK, ROWLOCK)
        WHERE l.resource = @P1
          AND l.owner_id = @P2
          AND l.fence = @P3);

SELECT CAST(@@ROWCOUNT AS bigint) AS affected;
