-- Serialise migration runs across processes: an exclusive application lock owned by the
-- transaction that applies and records the migrations, taken first in it and released by its
-- commit or rollback, so concurrent migrators apply each file once (the next one waits, then
-- finds it recorded). An application lock is independent of row versioning: READ COMMITTED
-- SNAPSHOT changes nothing.
-- Parameters: none.
-- Returns nothing; THROW 51000 when the lock was not granted within 20 seconds, less than the
-- default command timeout of 30 s so the reason arrives before the client gives up (or the wait
-- was cancelled or chosen as a deadlock victim).
SET NOCOUNT ON;

DECLARE @granted int;

EXEC @granted = sys.sp_getapplock
    @Resource = N'fenced-outbox migrations',
    @LockMode = N'Exclusive',
    @LockOwner = N'Transaction',
    @LockTimeout = 20000;

IF @granted < 0
BEGIN
    DECLARE @message nvarchar(200) = CONCAT(
        N'the migration lock was not granted (sp_getapplock returned ', @granted, N')'
    );
    THROW 51000, @message, 1;
END;
