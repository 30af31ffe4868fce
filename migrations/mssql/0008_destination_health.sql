-- 0008_destination_health: each destination's circuit breaker and pause, and when it was held
-- (see migrations/postgres/0008_destination_health.sql).
CREATE TABLE dbo.outbox_destinations (
    destination           varchar(64)       NOT NULL CONSTRAINT PK_outbox_destinations PRIMARY KEY,
    state                 varchar(16)       NOT NULL CONSTRAINT DF_outbox_destinations_state DEFAULT ('closed'),
    consecutive_failures  int               NOT NULL CONSTRAINT DF_outbox_destinations_failures DEFAULT (0),
    openings              int               NOT NULL CONSTRAINT DF_outbox_destinations_openings DEFAULT (0),
    opened_at             datetimeoffset(7) NULL,
    next_probe_at         datetimeoffset(7) NULL,
    probe_started_at      datetimeoffset(7) NULL,
    last_error            nvarchar(4000)    NULL,
    last_failure_at       datetimeoffset(7) NULL,
    paused_at             datetimeoffset(7) NULL,
    -- Sized in UTF-16 units for what Change::validate allows (200 and 2000 characters).
    paused_by             nvarchar(400)     NULL,
    pause_reason          nvarchar(4000)    NULL,
    changed_at            datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_destinations_changed DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT CK_outbox_destinations_state CHECK (state IN ('closed', 'open', 'half_open')),
    CONSTRAINT CK_outbox_destinations_counts CHECK (consecutive_failures >= 0 AND openings >= 0),
    CONSTRAINT CK_outbox_destinations_pause CHECK (
        (paused_at IS NULL AND paused_by IS NULL AND pause_reason IS NULL)
        OR (paused_at IS NOT NULL AND paused_by IS NOT NULL AND pause_reason IS NOT NULL))
);

CREATE TABLE dbo.outbox_destination_holds (
    id           bigint            IDENTITY(1, 1) NOT NULL CONSTRAINT PK_outbox_destination_holds PRIMARY KEY,
    destination  varchar(64)       NOT NULL,
    held_from    datetimeoffset(7) NOT NULL,
    held_until   datetimeoffset(7) NOT NULL,
    CONSTRAINT CK_outbox_destination_holds_order CHECK (held_until >= held_from)
);
CREATE INDEX IX_outbox_destination_holds_until ON dbo.outbox_destination_holds (held_until);

-- Pauses and resumes are logged with the replays, cancels, purges and partition counts.
ALTER TABLE dbo.outbox_admin_log DROP CONSTRAINT CK_outbox_admin_log_action;
ALTER TABLE dbo.outbox_admin_log ADD CONSTRAINT CK_outbox_admin_log_action
    CHECK (action IN ('replay', 'cancel', 'purge', 'partitions', 'pause', 'resume'));
