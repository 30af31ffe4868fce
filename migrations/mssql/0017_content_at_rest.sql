-- 0017_content_at_rest: an op's content may be erased once it is finished (issue 37, item 4):
-- the dispatcher's `erase_after` clears the body and the header values (the names stay) of
-- delivered, cancelled and superseded ops, keeping their rows and attempts, and stamps the
-- finished row's erased_at. Nullable without a default: no row is rewritten. Found by
-- IX_outbox_finished_at.
ALTER TABLE dbo.outbox_finished ADD erased_at datetimeoffset(7) NULL;
