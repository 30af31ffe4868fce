-- Erase after delivery (dispatcher.erase_after, 0017_content_at_rest.sql): clear the body and
-- the header values (the names stay, in order) of up to $3 delivered, cancelled or superseded
-- ops that finished more than $1 milliseconds ago, and stamp their finished rows' erased_at.
-- Their rows, attempts and request hash stay: `show` and the audit trail keep everything but
-- the content, and a rerun of the request is still a duplicate (G7). Dead ops are never erased.
-- Only ops that finished within $2 milliseconds before that cut-off are looked at (NULL: all):
-- the dispatcher passes the time since its last pass and a margin, so a pass reads the recent
-- part of outbox_finished_at_idx, not everything kept. The finished rows are locked and their
-- conditions read again as they are now: a row an operator's replay holds is skipped, one
-- replayed meanwhile is not a finished row any more (G6). Times are now(), the statement's
-- start, so the block range index can be used.
-- Parameters: $1 age in milliseconds, $2 window in milliseconds (NULL: no lower bound),
-- $3 batch size.
-- Returns one row per op erased.
WITH chosen AS (
    SELECT id FROM outbox_finished
    WHERE state IN ('delivered', 'cancelled', 'superseded')
      AND erased_at IS NULL
      AND finished_at < now() - $1::bigint * interval '1 millisecond'
      AND finished_at >= coalesce(now() - ($1::bigint + $2::bigint) * interval '1 millisecond',
                                  '-infinity'::timestamptz)
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE outbox_finished f
    SET erased_at = clock_timestamp()
    FROM chosen c
    WHERE f.id = c.id
      AND f.state IN ('delivered', 'cancelled', 'superseded')
      AND f.erased_at IS NULL
    RETURNING f.id
)
UPDATE outbox_requests r
SET body = '\x'::bytea,
    headers = (SELECT coalesce(jsonb_agg(jsonb_build_array(h -> 0, '') ORDER BY n), '[]'::jsonb)
               FROM jsonb_array_elements(r.headers) WITH ORDINALITY AS e(h, n))
FROM marked m
WHERE r.id = m.id
RETURNING r.id
