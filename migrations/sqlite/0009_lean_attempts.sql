-- 0009_lean_attempts: on PostgreSQL this drops the attempts' foreign key to their op, whose
-- check ran a trigger and locked the op's row for every attempt recorded. SQLite keeps the key:
-- it checks it with one probe of the op_id index inside the insert, with no trigger and no lock,
-- and its purges rely on ON DELETE CASCADE. Nothing changes here; the version keeps the three
-- backends' migrations in step.
SELECT 1;
