-- The requests of the ops op_erase_finished.sql stamped, in its transaction: the body becomes
-- empty and each header keeps its name with an empty value, in order. SQLite has no
-- data-modifying WITH to chain both in one statement as PostgreSQL does.
-- Parameters: ?1 op row ids (a JSON array).
UPDATE outbox_requests
SET body = X'',
    headers = (SELECT json_group_array(json_array(json_extract(h.value, '$[0]'), ''))
               FROM json_each(outbox_requests.headers) AS h)
WHERE id IN (SELECT value FROM json_each(?1))
