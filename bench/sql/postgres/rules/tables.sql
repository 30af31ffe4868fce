-- Copies of outbox_requests as 0013_queue_layout.sql leaves it, with its indexes, differing only
-- in how the request's rules are checked. Run after migrations 0001-0013, before 0014.
--   req_checks:  the eight CHECK constraints 0014 replaces;
--   req_none:    no rules at all (the floor);
--   req_trigger: 0014's row trigger (attached by trigger.sql, after 0014 has created its function).
CREATE TABLE req_checks (LIKE outbox_requests INCLUDING ALL);
CREATE TABLE req_none (LIKE outbox_requests INCLUDING ALL EXCLUDING CONSTRAINTS);
CREATE TABLE req_trigger (LIKE outbox_requests INCLUDING ALL EXCLUDING CONSTRAINTS);
