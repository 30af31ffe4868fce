-- The session options of every outbox connection, run once after login (pool.rs).
-- XACT_ABORT ON: any run-time error inside a transaction rolls the whole transaction back,
-- so a failed statement never leaves half of a multi-statement write committed.
-- The others are the settings filtered indexes (migrations/mssql/0001_init.sql) require of
-- every statement that writes the table; a driver's defaults may differ (error 1934 otherwise).
SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET QUOTED_IDENTIFIER ON;
SET NUMERIC_ROUNDABORT OFF;
