-- The fenced enqueue, in one statement: share-lock the lease row (see lease_check.sql), insert
-- the op only if this owner and token hold an unexpired lease (G4), skip it if the
-- (destination, idempotency key) exists (G7), and notify dispatchers on commit when one is idle
-- and listening (outbox_wakeups): NOTIFY serialises commits, so it is skipped while they are busy.
-- postgres.rs first runs it without the ON CONFLICT line, falling back to it on a unique
-- violation (OP_INSERT_NEW_IF_LEASE_HELD).
-- Parameters: $1 resource, $2 owner id, $3 token, $4 op id, $5 destination,
-- $6 idempotency key, $7 request hash, $8 order key, $9 partition, $10 method, $11 path,
-- $12 headers (JSON text), $13 content type, $14 body, $15 expire_with_generation,
-- $16 delay in milliseconds, $17 trace context.
-- Returns one row: the lease as seen (NULLs when never leased) and the new op's id (NULL
-- when nothing was inserted).
WITH lease AS (
    SELECT owner_id, fence, (expires_at > clock_timestamp()) AS live
    FROM outbox_leases
    WHERE resource = $1
    FOR SHARE
), inserted AS (
    INSERT INTO outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                            request_hash, order_key, partition, method, path, headers,
                            content_type, body, expire_with_generation, next_attempt_at,
                            trace_context)
    SELECT $4, $1, $3, $2, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13, $14, $15,
           clock_timestamp() + $16::bigint * interval '1 millisecond', $17
    FROM lease
    WHERE lease.owner_id = $2 AND lease.fence = $3 AND lease.live
    ON CONFLICT (destination, idempotency_key) DO NOTHING
    RETURNING id, partition
), notified AS (
    SELECT pg_notify('outbox_ops', partition::text)
    FROM inserted
    WHERE EXISTS (SELECT 1 FROM outbox_wakeups WHERE listening)
)
SELECT lease.owner_id, lease.fence, lease.live,
       (SELECT id FROM inserted) AS id,
       (SELECT count(*) FROM notified) AS notified
FROM (VALUES (1)) AS one (x)
LEFT JOIN lease ON true
