-- Acquire the lease on a resource when it is free, released or expired, in one statement.
-- G1: the token is the row's fence + 1, allocated atomically with the grant; the row is created
-- on first use, and concurrent first-time acquisitions meet on the primary key, so exactly one wins.
-- G2: "expired" is decided with clock_timestamp(), the database clock.
-- Parameters: $1 resource, $2 new owner id, $3 ttl in milliseconds.
-- Returns one row (fence, expires_at) when acquired, none when the lease is held.
INSERT INTO outbox_leases AS l (resource, owner_id, expires_at, fence)
VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond', 1)
ON CONFLICT (resource) DO UPDATE
    SET owner_id = EXCLUDED.owner_id,
        expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond',
        fence = l.fence + 1
    WHERE l.owner_id IS NULL OR l.expires_at <= clock_timestamp()
RETURNING l.fence, l.expires_at
