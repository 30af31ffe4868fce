-- 0009_lean_attempts: an attempt row no longer carries a foreign key to its op. The key's
-- check ran a trigger and a row lock on the op for every attempt recorded, about a sixth of
-- the database's work per delivered op (issue 26, measured with pg_stat_statements). Attempts
-- are only ever written for an op the same statement holds locked (completion, re-queue), so
-- the key never caught anything; the purges delete an op's attempts with it in one statement.
ALTER TABLE outbox_attempts DROP CONSTRAINT outbox_attempts_op_id_fkey;
