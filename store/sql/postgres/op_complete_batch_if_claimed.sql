-- Record the ends of many attempts in one statement (the recorder's batch): each op becomes
-- delivered, pending again (retry) or dead, and gets its attempt row (G6, G9). A delivered or
-- dead op's queue row is deleted and its finished row appended; a retried op's queue row gets
-- its new due time and gives up its claim. Each applies only while the op is claimed by this
-- partition lease and token, and the lease still has this owner and token (share-locked: no
-- takeover commits under it); the others change nothing.
-- Parameters: $1 partition lease resource, $2 owner id, $3 dispatcher token, then one array
-- element per completion: $4 op row ids, $5 new states, $6 retry delays (ms), $7 errors,
-- $8 attempt numbers, $9 attempt start times, $10 outcomes, $11 HTTP statuses, $12 excerpts,
-- $13 the attempts' span traceparents (kept on the attempt row, and on a retried op's queue
-- row, which the retry reads back to link its span; a finished row leaves it to the attempt
-- row, where a replay finds it).
-- No op is listed twice (Store::op_complete_batch takes each once). An attempt row already
-- there for the op and number (an abandoned term's `unknown`) is kept: tested by NOT EXISTS,
-- since ON CONFLICT DO NOTHING's speculative insertion writes a second WAL record per row (48
-- of the 942 bytes a delivered op wrote, counted by bench/sql/postgres/claims/wal.sh).
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
), ended AS (
    DELETE FROM outbox_queue q
    USING c
    WHERE q.id = c.id
      AND c.state IN ('delivered', 'dead')
      AND q.claimed_by_fence = $3
      AND q.claimed_by_lease = $1
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING q.id, c.state, q.attempts, q.next_attempt_at, q.retry_base_attempts,
              q.retry_since, c.error
), finished AS (
    INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at, last_error,
                                 retry_base_attempts, retry_since)
    SELECT id, state, attempts, next_attempt_at, clock_timestamp(), error, retry_base_attempts,
           retry_since
    FROM ended
), retried AS (
    UPDATE outbox_queue q
    SET claimed_by_fence = NULL,
        claimed_by_lease = NULL,
        claimed_at = NULL,
        next_attempt_at = clock_timestamp() + c.delay_ms * interval '1 millisecond',
        last_error = c.error,
        last_attempt_trace = c.trace
    FROM c
    WHERE q.id = c.id
      AND c.state = 'pending'
      AND q.claimed_by_fence = $3
      AND q.claimed_by_lease = $1
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING q.id
), done AS (
    SELECT id FROM ended
    UNION ALL
    SELECT id FROM retried
), attempts AS (
    INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, started_at, finished_at,
                                 outcome, http_status, error, response_excerpt, trace_context)
    SELECT r.op_id, c.attempt, $3, c.started_at, clock_timestamp(), c.outcome,
           c.http_status, c.error, c.excerpt, c.trace
    FROM done
    JOIN c ON c.id = done.id
    JOIN outbox_requests r ON r.id = done.id
    WHERE NOT EXISTS (
            SELECT 1 FROM outbox_attempts a
            WHERE a.op_id = r.op_id AND a.attempt = c.attempt)
)
SELECT id FROM done
