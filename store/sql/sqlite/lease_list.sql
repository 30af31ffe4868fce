-- Every lease row, with whether it is held now and for how long, by the database clock (G2).
-- Parameters: none.
SELECT resource,
       owner_id,
       fence,
       expires_at,
       partitions,
       (owner_id IS NOT NULL AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) AS held,
       CAST(round((julianday(expires_at) - julianday('now')) * 86400000.0) AS INTEGER) AS remaining_ms
FROM outbox_leases
ORDER BY resource
