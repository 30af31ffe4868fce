-- Release a lease for a login holding outbox_producer alone: outbox.release (0004_sql_api.sql).
-- Parameters: $1 resource, $2 owner id, $3 token.
-- Returns released, true when this owner and token held it.
SELECT outbox.release($1, $2, $3) AS released
