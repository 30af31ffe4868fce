-- Release a lease; the fence is kept so the next owner gets a larger token (G1).
-- G3: needs the same owner id and token, so an old owner cannot release a newer lease.
-- Parameters: $1 resource, $2 owner id, $3 token. Affects one row when released.
UPDATE outbox_leases
SET owner_id = NULL,
    expires_at = NULL
WHERE resource = $1
  AND owner_id = $2
  AND fence = $3
