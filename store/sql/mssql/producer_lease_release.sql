-- Release a lease for a user holding outbox_producer alone: outbox.Release (0004_sql_api.sql).
-- Parameters: @P1 resource, @P2 owner id, @P3 token.
-- Returns (Released bit): whether this owner and token held it.
EXEC outbox.Release @Resource = @P1, @OwnerId = @P2, @Token = @P3;
