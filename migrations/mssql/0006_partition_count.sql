-- 0006_partition_count: the partition count in force (see migrations/postgres/0006_partition_count.sql).
CREATE TABLE dbo.outbox_partition_count (
    singleton   bit               NOT NULL CONSTRAINT DF_outbox_partition_count_singleton DEFAULT (1)
                                  CONSTRAINT PK_outbox_partition_count PRIMARY KEY,
    partitions  int               NOT NULL,
    changed_at  datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_partition_count_changed DEFAULT (SYSUTCDATETIME()),
    -- Sized in UTF-16 units for what Change::validate allows (200 and 2000 characters).
    changed_by  nvarchar(400)     NOT NULL,
    reason      nvarchar(4000)    NOT NULL,
    CONSTRAINT CK_outbox_partition_count_singleton CHECK (singleton = 1),
    CONSTRAINT CK_outbox_partition_count_partitions CHECK (partitions BETWEEN 1 AND 1024)
);

-- A change of the count is logged with the replays, cancels and purges.
ALTER TABLE dbo.outbox_admin_log DROP CONSTRAINT CK_outbox_admin_log_action;
ALTER TABLE dbo.outbox_admin_log ADD CONSTRAINT CK_outbox_admin_log_action
    CHECK (action IN ('replay', 'cancel', 'purge', 'partitions'));
