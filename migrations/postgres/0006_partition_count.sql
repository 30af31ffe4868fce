-- 0006_partition_count: the partition count in force, kept in the database so that changing
-- it is an operation (`outboxctl partitions set N --reason …`), never an accident of one
-- config file. The first dispatcher to start records its dispatcher.partitions; a dispatcher
-- started with another count refuses to serve; running dispatchers follow a change: they
-- step down, and serve the new count once no partition lease of the old one is live. Ops keep
-- their slot (outbox_ops.partition, 0..1023): the count only regroups the slots.
CREATE TABLE outbox_partition_count (
    singleton   boolean     NOT NULL DEFAULT true PRIMARY KEY CHECK (singleton),
    partitions  integer     NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
    changed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    changed_by  text        NOT NULL CHECK (length(changed_by) BETWEEN 1 AND 200),
    reason      text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 2000)
);

-- A change of the count is logged with the replays, cancels and purges.
ALTER TABLE outbox_admin_log DROP CONSTRAINT outbox_admin_log_action;
ALTER TABLE outbox_admin_log ADD CONSTRAINT outbox_admin_log_action
    CHECK (action IN ('replay', 'cancel', 'purge', 'partitions'));
