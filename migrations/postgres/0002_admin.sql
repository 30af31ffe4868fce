-- What outboxctl needs: indexes for the questions operators ask of a large table, and a
-- replay that starts a fresh retry budget.

-- `list --resource R` and `show`: one resource's ops, newest first, history included.
CREATE INDEX outbox_ops_resource_idx ON outbox_ops (resource, id);

-- `list --state dead|cancelled|superseded` and `replay --state dead`: the few ops that need an
-- operator, newest first, without reading the delivered history.
CREATE INDEX outbox_ops_attention_idx ON outbox_ops (state, id)
    WHERE state IN ('dead', 'cancelled', 'superseded');

-- A replayed op gets the retry budget of a new one: the dispatcher counts attempts above
-- retry_base_attempts and the op's age from retry_since (NULL: from created_at). The
-- attempts counter itself keeps counting, so attempt numbers stay unique in the history.
ALTER TABLE outbox_ops ADD COLUMN retry_base_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE outbox_ops ADD COLUMN retry_since timestamptz NULL;

-- `tail` follows attempts by id; the admin log is read newest first.
CREATE INDEX outbox_admin_log_at_idx ON outbox_admin_log (at);
