-- 0004_sql_api: on PostgreSQL and SQL Server this migration installs the producer contract as
-- SQL functions and stored procedures for workers in any language. SQLite has no stored
-- procedures and no server to run them in: the fence is the enqueue statement with its lease
-- check, run by the Rust crate (outbox-producer) or by `outboxctl enqueue`, which non-Rust
-- producers on SQLite call (README "Producers in other languages"). A hand-written INSERT would
-- skip the builder's validation and the rejection record, so none is offered here.
-- Kept, with no statement, so every backend has the same migration numbers and names.
SELECT 1;
