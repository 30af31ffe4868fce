-- Every replay, cancel and purge an operator ran: who, what, why, on which ops.
-- Parameters: ?1 actor, ?2 action, ?3 reason, ?4 details (JSON text).
INSERT INTO outbox_admin_log (actor, action, reason, details)
VALUES (?1, ?2, ?3, ?4)
