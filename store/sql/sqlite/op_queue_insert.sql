-- The queue rows of requests just inserted by op_insert_if_lease_held.sql or
-- op_insert_batch_if_lease_held.sql, in the same transaction (and, for one op, the same
-- savepoint: a caller's transaction outlives a failed statement on SQLite, so the request is
-- undone with its queue row). Copies what the claim reads from the request; each op is due
-- after its own delay.
-- Parameters: ?1 JSON array of [op row id, delay in milliseconds] pairs.
INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                          expire_with_generation)
SELECT r.id,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now',
                printf('%+.3f seconds', json_extract(d.value, '$[1]') / 1000.0)),
       r.partition, r.destination, r.fence, r.order_key, r.expire_with_generation
FROM json_each(?1) AS d
CROSS JOIN outbox_requests AS r
WHERE r.id = json_extract(d.value, '$[0]')
