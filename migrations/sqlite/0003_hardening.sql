-- 0003_hardening: claims name the partition lease that took them, partition leases say how
-- many partitions their holder serves, and rows obey what the table can check by itself
-- (see migrations/postgres/0003_hardening.sql).

-- A claim records the partition lease (resource) beside its token: tokens of different
-- partitions can be equal, so completions, releases and re-queues match both (G9, G12).
ALTER TABLE outbox_ops ADD COLUMN claimed_by_lease TEXT NULL;

-- For dispatcher partition leases: the partition count their holder serves (G12).
ALTER TABLE outbox_leases ADD COLUMN partitions INTEGER NULL;

-- SQLite cannot add CHECK constraints to a table, so triggers refuse what they would: a path
-- that is not one leading / and visible ASCII of at most 2048 bytes, a body above the 16 MiB
-- ceiling, headers that are not a JSON array. The dispatcher re-checks every rule anyway (G11).
CREATE TRIGGER outbox_ops_row_rules_insert BEFORE INSERT ON outbox_ops
WHEN substr(NEW.path, 1, 1) IS NOT '/'
  OR substr(NEW.path, 1, 2) = '//'
  OR NEW.path GLOB '*[^!-~]*'
  OR length(CAST(NEW.path AS BLOB)) > 2048
  OR length(CAST(NEW.body AS BLOB)) > 16777216
  OR CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) <> 'array' ELSE 1 END
BEGIN
    SELECT RAISE(ABORT, 'outbox_ops row rules: the path must be one leading / and visible ASCII (at most 2048 bytes), the body at most 16 MiB, the headers a JSON array');
END;

CREATE TRIGGER outbox_ops_row_rules_update BEFORE UPDATE OF path, body, headers ON outbox_ops
WHEN substr(NEW.path, 1, 1) IS NOT '/'
  OR substr(NEW.path, 1, 2) = '//'
  OR NEW.path GLOB '*[^!-~]*'
  OR length(CAST(NEW.path AS BLOB)) > 2048
  OR length(CAST(NEW.body AS BLOB)) > 16777216
  OR CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) <> 'array' ELSE 1 END
BEGIN
    SELECT RAISE(ABORT, 'outbox_ops row rules: the path must be one leading / and visible ASCII (at most 2048 bytes), the body at most 16 MiB, the headers a JSON array');
END;
