-- The most-run statement: the fenced enqueue of one op on its own connection, as
-- op_insert_if_lease_held.sql but without its ON CONFLICT arbiter: a key that exists already
-- fails the whole statement with a unique violation (nothing written) instead of skipping the
-- row. Speculative insertion costs every row an arbiter probe and a second WAL record (about a
-- fifth of an insert, measured with pgbench); keys exist only when a producer retries, so
-- enqueues outside a caller's transaction try this first and fall back to
-- op_insert_if_lease_held.sql on a unique violation (G4, G7). Inside a caller's transaction a
-- failed statement would abort it, so there only the arbiter statement runs.
-- Parameters: as op_insert_if_lease_held.sql, $1..$18.
-- Returns the new op's id, or no row when the lease check failed (lease_check.sql tells why).
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
