-- 0004_sql_api: placeholder while the T-SQL procedures are written (see the postgres twin).
SELECT 1;
