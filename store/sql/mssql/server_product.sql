-- Which server answers. SQL Server and Azure SQL know no server property 'Babelfish' (NULL);
-- Babelfish for PostgreSQL reports it, and names itself in @@VERSION. Babelfish speaks SQL
-- Server's protocol and T-SQL but ignores table hints (UPDLOCK, HOLDLOCK, READPAST take no
-- lock), so the fence cannot hold there: store/src/mssql/mod.rs refuses it unless the URL
-- allows it for tests.
-- No parameters.
-- Returns one row: babelfish (bit), version (nvarchar, the first line of @@VERSION).
SELECT CAST(CASE
                WHEN SERVERPROPERTY('Babelfish') IS NOT NULL THEN 1
                WHEN @@VERSION LIKE N'%Babelfish%' THEN 1
                ELSE 0
            END AS bit) AS babelfish,
       CAST(@@VERSION AS nvarchar(4000)) AS version;
