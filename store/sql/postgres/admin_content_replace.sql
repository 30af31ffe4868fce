-- outboxctl keys rotate: one request's header values and body replaced by the same content
-- sealed with another key, only while they are still what admin_content_page.sql read: an
-- erase or purge that came between wins, and nothing is written back. The request hash stays:
-- it is over the clear request (G7). A dispatcher that claimed the op meanwhile holds the
-- content it read, which its keys open either way.
-- Parameters: $1 row id, $2 headers as read (JSON text), $3 body as read, $4 new headers (JSON
-- text), $5 new body. Affects one row or none.
UPDATE outbox_requests
SET headers = $4::jsonb,
    body = $5
WHERE id = $1
  AND headers = $2::jsonb
  AND body = $3
