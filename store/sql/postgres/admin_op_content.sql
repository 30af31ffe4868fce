-- outboxctl show --body: one op's content, its headers with their values and its body. The
-- viewer role may not read them (0016_component_roles.sql): it is refused here.
-- Parameters: $1 op row id.
SELECT headers::text AS headers, body
FROM outbox_requests
WHERE id = $1
