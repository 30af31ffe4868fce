-- 0014_request_rules.sql's trigger on the copy that has no CHECK constraints.
CREATE TRIGGER req_trigger_rules BEFORE INSERT OR UPDATE ON req_trigger
    FOR EACH ROW EXECUTE FUNCTION outbox_request_rules();
