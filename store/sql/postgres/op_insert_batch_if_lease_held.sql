-- The fenced enqueue of a whole batch, in one statement: share-lock the lease row (see
-- op_insert_if_lease_held.sql), insert every op only if this owner and token hold an unexpired
-- lease (G4), skip those whose (destination, idempotency key) exists (G7, resolved by the caller
-- in the same transaction), and notify an idle dispatcher once.
-- op_insert_batch_new_if_lease_held.sql runs first; this one after a unique violation.
-- Parameters: $1 resource, $2 owner id, $3 token, then one array element per op: $4 op ids,
-- $5 destinations, $6 idempotency keys, $7 request hashes, $8 order keys, $9 partitions,
-- $10 methods, $11 paths, $12 headers (JSON text), $13 content types, $14 bodies,
-- $15 expire_with_generation, $16 delays in milliseconds, $17 traceparents,
-- $18 tracestates.
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
    ON CONFLICT (destination, idempotency_key) DO NOTHING
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
