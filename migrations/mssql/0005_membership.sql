-- 0005_membership: dispatcher processes register themselves and heartbeat on the database
-- clock (see migrations/postgres/0005_membership.sql).
CREATE TABLE dbo.outbox_dispatchers (
    instance_id   uniqueidentifier  NOT NULL CONSTRAINT PK_outbox_dispatchers PRIMARY KEY,
    host          nvarchar(255)     NOT NULL,
    pid           bigint            NOT NULL,
    started_at    datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_dispatchers_started DEFAULT (SYSUTCDATETIME()),
    heartbeat_at  datetimeoffset(7) NOT NULL CONSTRAINT DF_outbox_dispatchers_heartbeat DEFAULT (SYSUTCDATETIME()),
    ttl_ms        bigint            NOT NULL,
    partitions    int               NOT NULL,
    led           int               NOT NULL CONSTRAINT DF_outbox_dispatchers_led DEFAULT (0),
    CONSTRAINT CK_outbox_dispatchers_host CHECK (LEN(host) >= 1),
    CONSTRAINT CK_outbox_dispatchers_ttl CHECK (ttl_ms BETWEEN 1 AND 86400000),
    CONSTRAINT CK_outbox_dispatchers_partitions CHECK (partitions BETWEEN 1 AND 1024),
    CONSTRAINT CK_outbox_dispatchers_led CHECK (led BETWEEN 0 AND partitions)
);
