-- The lease row of a resource. SQLite has one writer: run inside the enqueue's write
-- transaction, nobody can change the row until it ends (G4).
-- Parameters: ?1 resource. Returns (owner_id, fence, live) or no row.
SELECT owner_id, fence, (expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) AS live
FROM outbox_leases
WHERE resource = ?1
