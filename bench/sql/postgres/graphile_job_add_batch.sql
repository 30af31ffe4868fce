-- The fill of `outbox-bench peer` (issue 36): one graphile-worker job of the task `post` per
-- payload, added by graphile-worker's own add_jobs (default queue, priority, attempts and
-- run_at: unordered, due now); returns how many jobs it added.
-- $1 text[]: the payloads, each a JSON object (the body the op of the same key carries).
SELECT count(*) AS added
FROM graphile_worker.add_jobs(ARRAY(
    SELECT ROW('post', payload::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
    FROM unnest($1::text[]) AS payload
))
