-- On becoming leader of a partition, before re-queueing: close the attempts that older
-- dispatcher tokens left open, with outcome 'unknown' (the request may have been sent).
-- Parameters: ?1 partition lease resource, ?2 owner id, ?3 token, ?4 partition count,
-- ?5 partition index.
INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at, outcome, error)
SELECT o.op_id, o.attempts, o.claimed_by_fence, o.claimed_at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
       'unknown', 'dispatcher token ' || o.claimed_by_fence || ' lost its lease during the attempt'
FROM outbox_ops o
WHERE o.state = 'in_flight'
  AND o.claimed_by_fence <> ?3
  AND o.partition % ?4 = ?5
  AND EXISTS (
        SELECT 1 FROM outbox_leases
        WHERE resource = ?1 AND owner_id = ?2 AND fence = ?3
          AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
ON CONFLICT (op_id, attempt) DO NOTHING
