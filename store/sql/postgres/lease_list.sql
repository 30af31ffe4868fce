-- Every lease row, with whether it is held now and for how long, by the database clock (G2).
-- Parameters: none.
SELECT resource,
       owner_id,
       fence,
       expires_at,
       partitions,
       (owner_id IS NOT NULL AND expires_at > clock_timestamp()) AS held,
       (extract(epoch FROM (expires_at - clock_timestamp())) * 1000)::bigint AS remaining_ms
FROM outbox_leases
ORDER BY resource
