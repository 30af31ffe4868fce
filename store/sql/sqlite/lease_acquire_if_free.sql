-- Acquire the lease on a resource when it is free, released or expired, in one statement.
-- G1: the token is the row's fence + 1, allocated atomically with the grant (SQLite has one
-- writer, and a write statement holds the write lock from its start); the row is created on
-- first use and concurrent first-time acquisitions meet on the primary key: exactly one wins.
-- G2: "expired" is decided with the database clock, 'now', in the fixed text format.
-- Parameters: ?1 resource, ?2 new owner id, ?3 ttl in milliseconds.
-- Returns one row (fence, expires_at) when acquired, none when the lease is held.
INSERT INTO outbox_leases (resource, owner_id, expires_at, fence)
VALUES (?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', ?3 / 1000.0)), 1)
ON CONFLICT (resource) DO UPDATE
    SET owner_id = excluded.owner_id,
        expires_at = excluded.expires_at,
        fence = outbox_leases.fence + 1
    WHERE outbox_leases.owner_id IS NULL
       OR outbox_leases.expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
RETURNING fence, expires_at
