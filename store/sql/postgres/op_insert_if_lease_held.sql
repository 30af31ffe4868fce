-- The fenced enqueue, in one statement: insert the op only if this owner and token hold an
-- unexpired lease by the database clock (G4), share-locking the lease row so that no takeover
-- commits between the check and this transaction's commit (a takeover in progress is waited
-- for, and the row is checked again after it); skip it if the (destination, idempotency key)
-- exists (G7); and notify dispatchers on commit when one is idle and listening
-- (outbox_wakeups): NOTIFY serialises commits, so it is skipped while they are busy.
-- Outside a caller's transaction op_insert_new_if_lease_held.sql runs first; this one after a
-- unique violation.
-- Parameters: $1 resource, $2 owner id, $3 token, $4 op id, $5 destination,
-- $6 idempotency key, $7 request hash, $8 order key, $9 partition, $10 method, $11 path,
-- $12 headers (JSON text), $13 content type, $14 body, $15 expire_with_generation,
-- $16 delay in milliseconds, $17 traceparent, $18 tracestate.
-- Returns the new op's id, or no row when nothing was inserted (lease_check.sql tells why).
WITH request AS (
    INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, idempotency_key,
                                 request_hash, order_key, partition, method, path, headers,
                                 content_type, body, expire_with_generation, trace_context,
                                 trace_state)
    SELECT $4, $1, $3, $2, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13, $14, $15, $17, $18
    FROM outbox_leases
    WHERE resource = $1
      AND owner_id = $2
      AND fence = $3
      AND expires_at > clock_timestamp()
    FOR SHARE
    ON CONFLICT (destination, idempotency_key) DO NOTHING
    RETURNING id, partition, destination, fence, order_key, expire_with_generation
), queued AS (
    INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                              expire_with_generation)
    SELECT id, clock_timestamp() + $16::bigint * interval '1 millisecond', partition,
           destination, fence, order_key, expire_with_generation
    FROM request
    RETURNING id
)
SELECT id,
       (SELECT count(pg_notify('outbox_ops', w.partition::text))
        FROM outbox_wakeups w
        WHERE w.listening) AS notified
FROM queued
