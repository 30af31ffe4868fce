-- outboxctl keys rotate: the next page of requests' content by row id, with each one's
-- destination (part of what a sealed value is bound to). The rewrite
-- (admin_content_replace.sql) writes a row back only if it is still as read here.
-- Parameters: ?1 the last row id of the previous page (0 first), ?2 page size.
SELECT id, destination, headers, body
FROM outbox_requests
WHERE id > ?1
ORDER BY id
LIMIT ?2
