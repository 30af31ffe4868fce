-- Live partition leases whose holder serves another partition count than ours: while one
-- exists, a dispatcher with our count must not serve (G12). Looked up by name (one primary
-- key probe per partition lease name), never by scanning every lease.
-- Parameters: $1 every partition lease name (text[]), $2 our partition count.
SELECT resource, partitions
FROM outbox_leases
WHERE resource = ANY($1::text[])
  AND owner_id IS NOT NULL
  AND expires_at > clock_timestamp()
  AND partitions IS NOT NULL
  AND partitions <> $2
ORDER BY resource
