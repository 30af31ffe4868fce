-- Serialise migration runs across processes: the transaction that applies and records the
-- migrations takes SQLite's write lock at its start.
-- Parameters: none.
BEGIN IMMEDIATE
