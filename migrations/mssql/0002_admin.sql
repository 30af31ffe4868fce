-- What outboxctl needs: indexes for the questions operators ask of a large table, and a
-- replay that starts a fresh retry budget (see migrations/postgres/0002_admin.sql).

CREATE INDEX IX_outbox_ops_resource ON dbo.outbox_ops (resource, id);

CREATE INDEX IX_outbox_ops_attention ON dbo.outbox_ops (state, id)
    WHERE state IN ('dead', 'cancelled', 'superseded');

-- One column per ADD: Babelfish for PostgreSQL refuses several in one (SQL Server takes both).
ALTER TABLE dbo.outbox_ops ADD
    retry_base_attempts int NOT NULL CONSTRAINT DF_outbox_ops_retry_base DEFAULT (0);
ALTER TABLE dbo.outbox_ops ADD retry_since datetimeoffset(7) NULL;

CREATE INDEX IX_outbox_admin_log_at ON dbo.outbox_admin_log (at);
