-- Serialise migration runs across processes: a transaction-scoped advisory lock, taken first
-- in the transaction that applies and records the migrations.
-- Parameters: none.
SELECT pg_advisory_xact_lock(7338042501123)
