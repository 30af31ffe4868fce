-- Extend a lease that this owner still holds; the token stays the same.
-- G3: needs the same owner id and token and an unexpired lease (database clock), so an
-- expired generation is never revived and an old owner cannot extend a newer one.
-- Parameters: $1 resource, $2 owner id, $3 token, $4 ttl in milliseconds.
-- Returns one row (expires_at) when renewed, none otherwise.
UPDATE outbox_leases
SET expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond'
WHERE resource = $1
  AND owner_id = $2
  AND fence = $3
  AND expires_at > clock_timestamp()
RETURNING expires_at
