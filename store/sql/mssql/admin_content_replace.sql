-- outboxctl keys rotate: one request's header values and body replaced by the same content
-- sealed with another key, only while they are still what admin_content_page.sql read (an
-- erase or purge that came between wins). The request hash stays: it is over the clear
-- request (G7).
-- Parameters: @P1 row id (bigint), @P2 headers as read (nvarchar), @P3 body as read
-- (varbinary), @P4 new headers (nvarchar, JSON text), @P5 new body (varbinary).
-- Returns one row: affected (bigint), 1 or 0.
SET NOCOUNT ON;

UPDATE dbo.outbox_requests
SET headers = @P4,
    body = @P5
WHERE id = @P1
  AND headers = @P2
  AND body = @P3;

SELECT CAST(@@ROWCOUNT AS bigint) AS affected;
