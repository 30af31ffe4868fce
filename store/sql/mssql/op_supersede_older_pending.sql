-- supersede_pending: pending ops of older tokens for the same resource and destination become
-- superseded and are never sent (G5): their queue rows become finished rows
-- (0013_queue_layout.sql). Runs in the accepting op's transaction (or, outside one, in a
-- transaction of its own), and XACT_ABORT ON: the DELETE and the INSERT commit together or
-- not at all. Finds the resource's requests by
-- IX_outbox_ops_resource (resource, id), their queue rows by primary key. The DELETE finds its
-- rows with update locks and checks each current row (READ COMMITTED and READ COMMITTED
-- SNAPSHOT alike), so an op a dispatcher claimed meanwhile (claimed_by_fence set) is left
-- alone, and one this DELETE took first cannot be claimed (a claim reads WITH (READPAST,
-- UPDLOCK), and the row is gone when it commits).
-- Parameters: @P1 resource, @P2 destination, @P3 token of the accepted op.
-- Returns nothing.
SET NOCOUNT ON;

DECLARE @now datetimeoffset(7) = SYSUTCDATETIME();
DECLARE @gone TABLE (
    id                  bigint            NOT NULL PRIMARY KEY,
    attempts            int               NOT NULL,
    next_attempt_at     datetimeoffset(7) NOT NULL,
    retry_base_attempts int               NOT NULL,
    retry_since         datetimeoffset(7) NULL,
    last_attempt_trace  varchar(55)       NULL
);

DECLARE @ownTransaction bit = IIF(@@TRANCOUNT = 0, 1, 0);
IF @ownTransaction = 1 BEGIN TRANSACTION;

DELETE FROM dbo.outbox_queue
OUTPUT deleted.id, deleted.attempts, deleted.next_attempt_at, deleted.retry_base_attempts,
       deleted.retry_since, deleted.last_attempt_trace
INTO @gone (id, attempts, next_attempt_at, retry_base_attempts, retry_since, last_attempt_trace)
WHERE destination = CAST(@P2 AS varchar(64))
  AND fence < @P3
  AND claimed_by_fence IS NULL
  AND id IN (SELECT r.id FROM dbo.outbox_requests AS r WHERE r.resource = @P1);

INSERT INTO dbo.outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                                 retry_base_attempts, retry_since, last_attempt_trace)
SELECT g.id, 'superseded', g.attempts, g.next_attempt_at, @now,
       CONCAT(N'superseded by token ', @P3), g.retry_base_attempts, g.retry_since,
       g.last_attempt_trace
FROM @gone AS g;

IF @ownTransaction = 1 COMMIT TRANSACTION;
