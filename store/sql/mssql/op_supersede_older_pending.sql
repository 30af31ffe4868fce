-- supersede_pending: pending ops of older tokens for the same resource and destination become
-- superseded and are never sent (G5). Runs in the accepting op's transaction. The UPDATE finds
-- its rows with update locks and checks each current row (READ COMMITTED and READ COMMITTED
-- SNAPSHOT alike), so an op a dispatcher claimed meanwhile (no longer pending) is left alone,
-- and one this update took first cannot be claimed (a claim reads WITH (READPAST, UPDLOCK)).
-- Parameters: @P1 resource, @P2 destination, @P3 token of the accepted op.
-- Returns nothing.
UPDATE dbo.outbox_ops
SET state = 'superseded',
    finished_at = CAST(SYSUTCDATETIME() AS datetimeoffset(7)),
    last_error = CONCAT(N'superseded by token ', @P3)
WHERE resource = @P1
  AND destination = CAST(@P2 AS varchar(64))
  AND fence < @P3
  AND state = 'pending';
