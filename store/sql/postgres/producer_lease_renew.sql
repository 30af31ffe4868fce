-- Renew a lease for a login holding outbox_producer alone: outbox.renew (0004_sql_api.sql).
-- Parameters: $1 resource, $2 owner id, $3 token, $4 time to live in milliseconds.
-- Returns expires_at, NULL when this owner and token no longer hold it unexpired.
SELECT outbox.renew($1, $2, $3, $4::bigint * interval '1 millisecond') AS expires_at
