-- 0017_content_at_rest: an op's content may be erased once it is finished (issue 37, item 4):
-- the dispatcher's `erase_after` clears the body and the header values (the names stay) of
-- delivered, cancelled and superseded ops, keeping their rows and attempts, and stamps the
-- finished row's erased_at. Nullable without a default: no row is rewritten. Found by
-- IX_outbox_finished_at.
ALTER TABLE dbo.outbox_finished ADD erased_at datetimeoffset(7) NULL;

-- Key rotations (`outboxctl keys rotate`) are logged with the other operators' changes.
ALTER TABLE dbo.outbox_admin_log DROP CONSTRAINT CK_outbox_admin_log_action;
ALTER TABLE dbo.outbox_admin_log ADD CONSTRAINT CK_outbox_admin_log_action
    CHECK (action IN ('replay', 'cancel', 'purge', 'partitions', 'pause', 'resume', 'rotate'));
