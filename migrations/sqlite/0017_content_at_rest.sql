-- 0017_content_at_rest: an op's content may be erased once it is finished (issue 37, item 4):
-- the dispatcher's `erase_after` clears the body and the header values (the names stay) of
-- delivered, cancelled and superseded ops, keeping their rows and attempts, and stamps the
-- finished row's erased_at (RFC 3339 text, as every time here). Found by outbox_finished_at_idx.
ALTER TABLE outbox_finished ADD COLUMN erased_at TEXT NULL;
