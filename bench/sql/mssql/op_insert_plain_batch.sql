-- Baseline for batches: many op rows in one plain INSERT (no lease check), from a JSON array
-- (SQL Server has no array parameters; OPENJSON as in op_insert_batch_if_lease_held.sql, with
-- the bytes apart in one binary value, as there: each op's 32-byte hash at `at`, then its body).
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 JSON array of {op_id, key, at,
-- body_bytes, partition}, @P5 the order key ('' : unordered; a typed text, never an untyped
-- NULL, which Babelfish refuses), @P6 the hashes and bodies (varbinary); the other columns are
-- the workload's constants.
INSERT INTO dbo.outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                            request_hash, order_key, partition, method, path, headers,
                            content_type, body)
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
