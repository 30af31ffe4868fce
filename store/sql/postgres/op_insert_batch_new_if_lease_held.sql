-- The fenced enqueue of a whole batch on its own connection, as
-- op_insert_batch_if_lease_held.sql but without its ON CONFLICT arbiter: a key that exists
-- already, or twice in the batch, fails the whole statement with a unique violation (nothing
-- written); the caller then runs op_insert_batch_if_lease_held.sql in a transaction (G4, G7).
-- Parameters: as op_insert_batch_if_lease_held.sql, $1..$18.
-- Returns one row: the lease as seen (NULLs when never leased) and the ids and op ids inserted.
WITH lease AS (
    SELECT owner_id, fence, (expires_at > clock_timestamp()) AS live
    FROM outbox_leases
    WHERE resource = $1
    FOR SHARE
), u AS (
    SELECT *
    FROM unnest($4::uuid[], $5::text[], $6::text[], $7::bytea[], $8::text[], $9::int[],
                $10::text[], $11::text[], $12::text[], $13::text[], $14::bytea[], $15::bool[],
                $16::bigint[], $17::text[], $18::text[])
         WITH ORDINALITY
         AS u(op_id, destination, idempotency_key, request_hash, order_key, partition, method,
              path, headers, content_type, body, expire_with_generation, delay_ms,
              trace_context, trace_state, ord)
), inserted AS (
    INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, idempotency_key,
                                 request_hash, order_key, partition, method, path, headers,
                                 content_type, body, expire_with_generation, trace_context,
                                 trace_state)
    SELECT u.op_id, $1, $3, $2, u.destination, u.idempotency_key, u.request_hash, u.order_key,
           u.partition, u.method, u.path, u.headers::jsonb, u.content_type, u.body,
           u.expire_with_generation, u.trace_context, u.trace_state
    FROM u
    CROSS JOIN lease
    WHERE lease.owner_id = $2 AND lease.fence = $3 AND lease.live
    ORDER BY u.ord
    RETURNING id, op_id, partition, destination, fence, order_key, expire_with_generation
), queued AS (
    -- Each request's queue row, due after its own delay (matched by op id).
    INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation)
    SELECT i.id, clock_timestamp() + u.delay_ms * interval '1 millisecond', i.partition,
           i.destination, i.fence, i.order_key, i.expire_with_generation
    FROM inserted i
    JOIN u ON u.op_id = i.op_id
    RETURNING id
), notified AS (
    SELECT pg_notify('outbox_ops', 'batch')
    FROM (SELECT 1 FROM queued LIMIT 1) AS any_inserted
    WHERE EXISTS (SELECT 1 FROM outbox_wakeups WHERE listening)
)
SELECT lease.owner_id, lease.fence, lease.live,
       (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM inserted) AS ids,
       (SELECT coalesce(array_agg(op_id ORDER BY id), '{}') FROM inserted) AS op_ids,
       (SELECT count(*) FROM notified) AS notified
FROM (VALUES (1)) AS one (x)
LEFT JOIN lease ON true
