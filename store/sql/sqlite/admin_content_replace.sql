-- outboxctl keys rotate: one request's header values and body replaced by the same content
-- sealed with another key, only while they are still what admin_content_page.sql read (an
-- erase or purge that came between wins). The request hash stays: it is over the clear
-- request (G7).
-- Parameters: ?1 row id, ?2 headers as read, ?3 body as read, ?4 new headers (JSON text),
-- ?5 new body. Affects one row or none.
UPDATE outbox_requests
SET headers = ?4,
    body = ?5
WHERE id = ?1
  AND headers = ?2
  AND body = ?3
