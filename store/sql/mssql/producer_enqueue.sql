-- Enqueue a batch for a user holding outbox_producer alone: outbox.EnqueueOps
-- (0020_producer_procedure.sql), in the caller's transaction when there is one, otherwise in
-- a transaction of its own. Every op or none; a rejection or a conflict is a row, not an
-- error, and the procedure keeps the rejection.
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 the ops as JSON (the batch insert's,
-- each with "supersede"), @P5 their request hashes and bodies (varbinary), @P6 the stage
-- (enqueue, enqueue_batch or enqueue_in).
-- Returns (Outcome varchar, OpId uniqueidentifier, Seq bigint, State varchar, CurrentToken
-- bigint): a row per op, or one row for a rejection or a conflict.
EXEC outbox.EnqueueOps @Resource = @P1, @OwnerId = @P2, @Token = @P3, @Ops = @P4, @Bytes = @P5,
                       @Stage = @P6;
