-- 0003_hardening: claims name the partition lease that took them, partition leases say how
-- many partitions their holder serves, and rows obey what the table can check by itself
-- (see migrations/postgres/0003_hardening.sql).

-- A claim records the partition lease (resource) beside its token (G9, G12). It holds an
-- outbox_leases.resource and is compared with it, so it has that column's binary collation
-- (0001_init.sql): exact, and no collation conflict in the comparison.
ALTER TABLE dbo.outbox_ops ADD claimed_by_lease nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL;

-- For dispatcher partition leases: the partition count their holder serves (G12).
ALTER TABLE dbo.outbox_leases ADD partitions int NULL;

-- The path is one leading / and visible ASCII (at most 2048 characters: the column's size),
-- the body within the 16 MiB ceiling, the headers a JSON array. The dispatcher re-checks
-- every rule anyway (G11). A new constraint is checked against the existing rows by default
-- (WITH CHECK is SQL Server's default for ADD CONSTRAINT; Babelfish refuses the keywords).
ALTER TABLE dbo.outbox_ops ADD CONSTRAINT CK_outbox_ops_path_format
    CHECK (LEFT(path, 1) = N'/' AND LEFT(path, 2) <> N'//'
           AND path NOT LIKE N'%[^!-~]%' COLLATE Latin1_General_BIN2);
ALTER TABLE dbo.outbox_ops ADD CONSTRAINT CK_outbox_ops_body_size
    CHECK (DATALENGTH(body) <= 16777216);
ALTER TABLE dbo.outbox_ops ADD CONSTRAINT CK_outbox_ops_headers_array
    CHECK (ISJSON(headers) = 1 AND LEFT(LTRIM(headers), 1) = N'[');
