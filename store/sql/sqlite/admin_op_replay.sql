-- outboxctl replay: finished ops back to pending, due now, with a fresh retry budget
-- (0002_admin.sql): the finished row becomes a queue row again; the attempt history and the
-- idempotency key are kept. Only ops admin_op_lock.sql read and admin.rs allowed. A
-- transaction script, in the change's BEGIN IMMEDIATE transaction: the delete takes the
-- finished rows the insert copied.
-- The replayed attempt's span links to the op's last attempt: its traceparent is the finished
-- row's when kept there (a cancelled or superseded op's), otherwise its newest attempt row's
-- (a completion writes it on the attempt row only: one copy, not two).
-- Parameters: ?1 op row ids (a JSON array).
INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, order_key,
                          expire_with_generation, attempts, retry_base_attempts, retry_since,
                          last_error, last_attempt_trace)
SELECT f.id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), r.partition, r.destination, r.fence,
       r.order_key, r.expire_with_generation, f.attempts, f.attempts,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), f.last_error,
       coalesce(f.last_attempt_trace,
                (SELECT a.trace_context FROM outbox_attempts a
                 WHERE a.op_id = r.op_id
                 ORDER BY a.attempt DESC
                 LIMIT 1))
FROM outbox_finished f
JOIN outbox_requests r ON r.id = f.id
WHERE f.id IN (SELECT value FROM json_each(?1));

DELETE FROM outbox_finished
WHERE id IN (SELECT value FROM json_each(?1))
  AND EXISTS (SELECT 1 FROM outbox_queue q WHERE q.id = outbox_finished.id)
