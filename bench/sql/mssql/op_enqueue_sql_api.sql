-- The SQL API's fenced enqueue (migration 0004_sql_api) as a worker in another language calls
-- it: one EXEC in autocommit, the parameters bound by name, the options after the idempotency
-- key left to their defaults. The same op as the Rust path's single enqueue.
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 destination, @P5 method, @P6 path,
-- @P7 headers (JSON text), @P8 body, @P9 content type, @P10 idempotency key.
EXEC outbox.Enqueue @Resource = @P1, @OwnerId = @P2, @Token = @P3, @Destination = @P4,
    @Method = @P5, @Path = @P6, @Headers = @P7, @Body = @P8, @ContentType = @P9,
    @IdempotencyKey = @P10
