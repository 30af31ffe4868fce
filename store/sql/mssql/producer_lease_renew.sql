-- Renew a lease for a user holding outbox_producer alone: outbox.Renew (0004_sql_api.sql).
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 time to live in milliseconds (int).
-- Returns (ExpiresAt datetimeoffset), or no row when this owner and token no longer hold it.
EXEC outbox.Renew @Resource = @P1, @OwnerId = @P2, @Token = @P3, @TtlMs = @P4;
