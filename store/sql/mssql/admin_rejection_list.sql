-- outboxctl rejections: refused enqueues of the last @P1 milliseconds, newest first, of one
-- resource or all. Uses IX_outbox_rejections_resource (resource, rejected_at) or
-- IX_outbox_rejections_time (rejected_at), or walks the primary key backwards to the page's
-- end: OPTION (RECOMPILE) compiles the statement for this call's values (a NULL resource drops
-- out), so the plan fits the filter actually set.
-- The resource compares exactly, as PostgreSQL compares text: = ignores trailing spaces,
-- so the lengths must match too (DATALENGTH, a residual check on the rows sought).
-- A plain read for operators: a statement snapshot under READ COMMITTED SNAPSHOT, short
-- shared locks under READ COMMITTED.
-- Time is SYSUTCDATETIME(), read once (the database clock). admin.rs clamps the age to
-- MAX_AGE_MS (about 63 years: older than every row), and it is split into seconds and
-- milliseconds, so DATEADD's int arguments never overflow.
-- Parameters: @P1 age in milliseconds (bigint), @P2 resource (nvarchar; NULL: all), @P3 how
-- many at most (bigint).
-- Returns id bigint, resource nvarchar, owner_id uniqueidentifier, fence bigint,
-- current_fence bigint (NULL), destination varchar (NULL), idempotency_key varchar (NULL),
-- stage varchar, reason varchar, rejected_at datetimeoffset; newest first.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @since datetimeoffset(7) =
    DATEADD(MILLISECOND, -CAST(@P1 % 1000 AS int), DATEADD(SECOND, -CAST(@P1 / 1000 AS int), @now));

SELECT TOP (@P3) id,
       resource,
       owner_id,
       fence,
       current_fence,
       destination,
       idempotency_key,
       stage,
       reason,
       rejected_at
FROM dbo.outbox_rejections
WHERE rejected_at > @since
  AND (@P2 IS NULL OR (resource = @P2 AND DATALENGTH(resource) = DATALENGTH(@P2)))
ORDER BY id DESC
OPTION (RECOMPILE);
