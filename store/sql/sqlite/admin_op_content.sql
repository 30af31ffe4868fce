-- outboxctl show --body: one op's content, its headers with their values and its body.
-- Parameters: ?1 op row id.
SELECT headers, body
FROM outbox_requests
WHERE id = ?1
