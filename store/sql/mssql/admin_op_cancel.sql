-- outboxctl cancel: ops that are never sent afterwards (G5). Only ops admin_op_lock.sql locked
-- and admin.rs allowed (pending or dead), inside the same transaction: they are still held
-- WITH (UPDLOCK, HOLDLOCK) from there, under READ COMMITTED and READ COMMITTED SNAPSHOT alike
-- (a locking read, never a version), so no claim took them meanwhile and this UPDATE converts
-- those locks to exclusive ones, held to the commit.
-- Time is SYSUTCDATETIME(), the database clock. admin.rs cuts the note to ERROR_MAX_CHARS
-- (2048) characters, as every last_error is cut, and last_error is nvarchar(max).
-- Parameters: @P1 op row ids (nvarchar, a JSON array of numbers), @P2 the note kept as
-- last_error (who and why).
-- Returns nothing.
UPDATE dbo.outbox_ops
SET state = 'cancelled',
    finished_at = CAST(SYSUTCDATETIME() AS datetimeoffset(7)),
    last_error = @P2
WHERE id IN (SELECT CAST(j.value AS bigint) AS id FROM OPENJSON(@P1) AS j);
