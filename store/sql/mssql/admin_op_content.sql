-- outboxctl show --body: one op's content, its headers with their values and its body.
-- Parameters: @P1 op row id (bigint).
-- Returns headers nvarchar (JSON text), body varbinary; or no row.
SELECT headers, body
FROM dbo.outbox_requests
WHERE id = @P1;
