-- Baseline for batches: many op rows in one plain INSERT (no lease check), from a JSON array
-- (SQL Server has no array parameters; OPENJSON as in op_insert_batch_if_lease_held.sql).
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 JSON array of {op_id, key, hash
-- (hex), partition, body (hex)}, @P5 the order key (NULL: unordered); the other columns are
-- the workload's constants.
INSERT INTO dbo.outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                            request_hash, order_key, partition, method, path, headers,
                            content_type, body)
SELECT j.op_id, @P1, @P3, @P2, 'statements', j.idempotency_key,
       CONVERT(varbinary(32), j.hash, 2), @P5, j.partition, 'POST', N'/v1/statements',
       N'[["X-Request-Source","bench"]]', N'application/json',
       CONVERT(varbinary(max), j.body, 2)
FROM OPENJSON(@P4) WITH (
    op_id uniqueidentifier '$.op_id',
    idempotency_key varchar(255) '$.key',
    hash varchar(64) '$.hash',
    partition int '$.partition',
    body varchar(max) '$.body'
) AS j;
