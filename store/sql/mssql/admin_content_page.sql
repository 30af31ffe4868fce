-- outboxctl keys rotate: the next page of requests' content by row id, with each one's
-- destination (part of what a sealed value is bound to). The rewrite
-- (admin_content_replace.sql) writes a row back only if it is still as read here.
-- Parameters: @P1 the last row id of the previous page (bigint, 0 first), @P2 page size (bigint).
-- Returns id bigint, destination varchar, headers nvarchar (JSON text), body varbinary.
SELECT TOP (@P2) id, destination, headers, body
FROM dbo.outbox_requests
WHERE id > @P1
ORDER BY id;
