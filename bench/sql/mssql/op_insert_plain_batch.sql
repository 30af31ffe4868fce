-- Baseline for batches: many ops in one plain INSERT of their requests and one of their queue
-- rows (0013_queue_layout.sql), in one transaction, with no lease check, from a JSON array
-- (SQL Server has no array parameters; OPENJSON as in op_insert_batch_if_lease_held.sql, with
-- the bytes apart in one binary value, as there: each op's 32-byte hash at `at`, then its body).
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 JSON array of {op_id, key, at,
-- body_bytes, partition}, @P5 the order key ('' : unordered; a typed text, never an untyped
-- NULL, which Babelfish refuses), @P6 the hashes and bodies (varbinary); the other columns are
-- the workload's constants.
SET NOCOUNT ON;

DECLARE @inserted TABLE (
    id         bigint NOT NULL PRIMARY KEY,
    partition  int    NOT NULL
);

BEGIN TRANSACTION;

INSERT INTO dbo.outbox_requests (op_id, resource, fence, owner_id, destination,
                                 idempotency_key, request_hash, order_key, partition, method,
                                 path, headers, content_type, body)
OUTPUT inserted.id, inserted.partition INTO @inserted (id, partition)
SELECT j.op_id, @P1, @P3, @P2, 'statements', j.idempotency_key,
       SUBSTRING(@P6, j.at, 32), NULLIF(@P5, N''), j.partition, 'POST', N'/v1/statements',
       N'[["X-Request-Source","bench"]]', N'application/json',
       SUBSTRING(@P6, j.at + 32, j.body_bytes)
FROM OPENJSON(@P4) WITH (
    op_id uniqueidentifier '$.op_id',
    idempotency_key varchar(255) '$.key',
    at bigint '$.at',
    body_bytes bigint '$.body_bytes',
    partition int '$.partition'
) AS j;

INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation)
SELECT i.id, SYSUTCDATETIME(), i.partition, 'statements', @P3, NULLIF(@P5, N''), 0
FROM @inserted AS i;

COMMIT TRANSACTION;
