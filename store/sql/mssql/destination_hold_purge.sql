-- Retention of the holds: delete those that ended more than @P1 milliseconds ago (the
-- dispatchers read holds back only as far as twice their longest max_age). The age is
-- subtracted as seconds and milliseconds, so a long one never overflows DATEADD.
-- Parameters: @P1 age in milliseconds (bigint).
-- Returns: affected bigint.
SET NOCOUNT ON;
DECLARE @cut datetimeoffset(7) =
    DATEADD(MILLISECOND, -CAST(@P1 % 1000 AS int),
            DATEADD(SECOND, -CAST(@P1 / 1000 AS int), CAST(SYSUTCDATETIME() AS datetimeoffset(7))));
DELETE FROM dbo.outbox_destination_holds WHERE held_until < @cut;
SELECT CAST(@@ROWCOUNT AS bigint) AS affected;
