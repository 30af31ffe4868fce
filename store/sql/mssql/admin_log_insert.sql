-- Every replay, cancel and purge an operator ran: who, what, why, on which ops. Runs inside
-- the change's transaction (admin/change.rs), so the log row commits with the change or not
-- at all; an insert takes only its new row's exclusive lock, under READ COMMITTED and READ
-- COMMITTED SNAPSHOT alike. `at` is the column's default, SYSUTCDATETIME() (the database
-- clock, G2). The details are JSON text written by admin/change.rs (serde_json).
-- Parameters: @P1 actor (nvarchar), @P2 action (replay, cancel or purge), @P3 reason
-- (nvarchar), @P4 details (nvarchar, JSON text).
-- Returns nothing.
INSERT INTO dbo.outbox_admin_log (actor, action, reason, details)
VALUES (@P1, CAST(@P2 AS varchar(16)), @P3, @P4);
