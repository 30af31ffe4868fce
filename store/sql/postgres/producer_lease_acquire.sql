-- Acquire a lease for a login holding outbox_producer alone: outbox.try_acquire
-- (0004_sql_api.sql), which makes the owner id; its time to live within the server's bounds
-- (outbox.lease_min_ttl, outbox.lease_max_ttl: 5 s..=300 s unless set).
-- Parameters: $1 resource, $2 time to live in milliseconds.
-- Returns owner_id, fence, expires_at; no row when another owner holds it.
SELECT owner_id, token AS fence, expires_at
FROM outbox.try_acquire($1, $2::bigint * interval '1 millisecond')
