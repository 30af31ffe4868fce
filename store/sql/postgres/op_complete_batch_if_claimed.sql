-- Record the ends of many attempts in one statement (the recorder's batch): each op becomes
-- delivered, pending again (retry) or dead, and gets its attempt row (G6, G9). Each applies only
-- while the op is in flight under this partition lease and token, and the lease still has this
-- owner and token (share-locked: no takeover commits under it); the others change nothing.
-- Parameters: $1 partition lease resource, $2 owner id, $3 dispatcher token, then one array
-- element per completion: $4 op row ids, $5 new states, $6 retry delays (ms), $7 errors,
-- $8 attempt numbers, $9 attempt start times, $10 outcomes, $11 HTTP statuses, $12 excerpts,
-- $13 the attempts' span traceparents (kept on the attempt and the op: a retry's span links to it).
-- Returns the row ids that applied.
WITH lease AS (
    SELECT 1 FROM outbox_leases
    WHERE resource = $1 AND owner_id = $2 AND fence = $3
    FOR SHARE
), c AS (
    SELECT *
    FROM unnest($4::bigint[], $5::text[], $6::bigint[], $7::text[], $8::int[],
                $9::timestamptz[], $10::text[], $11::int[], $12::text[], $13::text[])
         AS c(id, state, delay_ms, error, attempt, started_at, outcome, http_status, excerpt,
              trace)
), done AS (
    UPDATE outbox_ops o
    SET state = c.state,
        claimed_by_fence = NULL,
        claimed_by_lease = NULL,
        claimed_at = NULL,
        next_attempt_at = CASE WHEN c.state = 'pending'
                               THEN clock_timestamp() + c.delay_ms * interval '1 millisecond'
                               ELSE o.next_attempt_at END,
        delivered_at = CASE WHEN c.state = 'delivered' THEN clock_timestamp() ELSE o.delivered_at END,
        finished_at = CASE WHEN c.state IN ('delivered', 'dead') THEN clock_timestamp() ELSE NULL END,
        last_error = c.error,
        last_attempt_trace = c.trace
    FROM c
    WHERE o.id = c.id
      AND o.state = 'in_flight'
      AND o.claimed_by_fence = $3
      AND o.claimed_by_lease = $1
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING o.id, o.op_id
), attempts AS (
    INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at,
                                 outcome, http_status, error, response_excerpt, trace_context)
    SELECT done.op_id, c.attempt, $3, c.started_at, clock_timestamp(), c.outcome,
           c.http_status, c.error, c.excerpt, c.trace
    FROM done JOIN c ON c.id = done.id
    ON CONFLICT (op_id, attempt) DO NOTHING
)
SELECT id FROM done
