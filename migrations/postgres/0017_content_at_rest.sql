-- 0017_content_at_rest: an op's content may be erased once it is finished, and re-encrypted
-- under another key (issue 37, items 3 and 4,
-- docs/design/least-privilege.md): the dispatcher's `erase_after` clears the body and the
-- header values (the names stay) of delivered, cancelled and superseded ops, keeping their
-- rows and attempts for the audit trail, and stamps the finished row's erased_at. Dead ops are
-- never erased (a replay sends them again), and an erased op is never replayed.
--
-- The column is nullable without a default: a catalog change, no row is rewritten. The
-- erasure finds its rows by finished_at (outbox_finished_at_idx) over the window since its
-- last pass, so no index is added and an op costs nothing more when erasure is off.
ALTER TABLE outbox_finished ADD COLUMN erased_at timestamptz NULL;

-- Key rotations (`outboxctl keys rotate`, which re-encrypts ops' content under another key)
-- are logged with the other operators' changes.
ALTER TABLE outbox_admin_log DROP CONSTRAINT outbox_admin_log_action;
ALTER TABLE outbox_admin_log ADD CONSTRAINT outbox_admin_log_action
    CHECK (action IN ('replay', 'cancel', 'purge', 'partitions', 'pause', 'resume', 'rotate'));

-- The rights it needs: the dispatcher clears the content of the requests it erases, and the
-- operator's `outboxctl keys rotate` rewrites content under another key (both by column: no
-- other column of a request changes after its enqueue). grant_roles() keeps 0016's grants and
-- adds these, so a deployment that creates the roles later gets all of them from one call.
ALTER FUNCTION outbox.grant_roles() RENAME TO grant_roles_0016;

CREATE FUNCTION outbox.grant_roles() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT outbox.grant_roles_0016() THEN
        RETURN false;
    END IF;
    GRANT UPDATE (body, headers) ON outbox_requests TO outbox_dispatcher, outbox_operator;
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION outbox.grant_roles() FROM PUBLIC;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION outbox.grant_roles() SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
END
$$;

SELECT outbox.grant_roles();
