-- Acquire a lease for a user holding outbox_producer alone: outbox.TryAcquire
-- (0004_sql_api.sql), which makes the owner id and checks the name and the time to live.
-- Parameters: @P1 resource, @P2 time to live in milliseconds (int).
-- Returns (OwnerId uniqueidentifier, Token bigint, ExpiresAt datetimeoffset), or no row while
-- another owner holds the lease.
EXEC outbox.TryAcquire @Resource = @P1, @TtlMs = @P2;
