-- outboxctl list: one page of ops, newest first (also the selection of replay and cancel by
-- filter). One static statement: every filter is a parameter, NULL when it is not set, and
-- OPTION (RECOMPILE) compiles the statement for the values of each call (SQL Server embeds
-- the parameters' values when it recompiles), so the filters that are not set drop out and
-- the plan is chosen for the ones that are, as the sqlx backends' query builder appends only
-- the filters set. Each op is its request with its queue row (unfinished) or its finished row
-- (0013_queue_layout.sql), joined by primary key, so the page is read walking the requests'
-- primary key backwards, as on PostgreSQL, not through the view dbo.outbox_ops. Indexes
-- (outbox_requests keeps the old table's names): the primary key backwards with no filter,
-- --destination, --since and --before (each a large share of a table that grows by id; with
-- TOP the optimizer walks ids newest first to the page's end, or seeks
-- UQ_outbox_ops_destination_key when the destination is rare); IX_outbox_ops_resource
-- (resource, id) for --resource; IX_outbox_finished_attention (state, id) for --state dead,
-- cancelled or superseded (@P2 = 1 then adds a semi-join that names the filtered index's
-- predicate), and the queue for --state pending or in_flight (@P11 = 1 adds the semi-join
-- that names it); UQ_outbox_ops_destination_key for --key (with --destination one seek;
-- without it one seek per destination in use, @P6 from admin_destination_list.sql).
-- Strings compare exactly, as PostgreSQL compares text: the parameter is cast to the
-- column's type (varchar for destination and key), never the column, so the indexes are
-- still sought; admin.rs passes a destination or key only when it is ASCII and fits the
-- column (so the cast loses nothing; otherwise no op can match and nothing is asked), and
-- = ignores trailing spaces, so the lengths must match too (DATALENGTH, a residual check on
-- the rows sought). Destinations from OPENJSON are collated as the column
-- (Latin1_General_100_BIN2); states compare in the column's collation, the database's.
-- A plain read for operators: a statement snapshot under READ COMMITTED SNAPSHOT, short
-- shared locks under READ COMMITTED; a change locks the ops it selected again
-- (admin_op_lock.sql) and decides from what it reads then. Under locking READ COMMITTED an op
-- that moves between its queue and finished rows while the page is read (a completion, a
-- replay) may be found in neither and is then left off that page (never shown without a
-- state); RCSI reads one snapshot, where each op has exactly one of them.
-- Parameters: @P1 states (nvarchar, a JSON array of state names; NULL: any state), @P2 every
-- state asked for is dead, cancelled or superseded (bit), @P3 destination (nvarchar or NULL),
-- @P4 resource (nvarchar or NULL), @P5 idempotency key (nvarchar or NULL), @P6 the
-- destinations in use (nvarchar, a JSON array of names; set only with @P5 and without @P3,
-- otherwise NULL), @P7 created at or after (datetimeoffset or NULL), @P8 created before
-- (datetimeoffset or NULL), @P9 only ids below (bigint or NULL: the page cursor), @P10 how
-- many at most (bigint), @P11 every state asked for is pending or in_flight (bit).
-- Returns id bigint, op_id uniqueidentifier, resource nvarchar, fence bigint, destination
-- varchar, idempotency_key varchar, state varchar, attempts int, next_attempt_at
-- datetimeoffset, created_at datetimeoffset, finished_at datetimeoffset (NULL), last_error
-- nvarchar (NULL), body_bytes bigint; newest first.
SELECT TOP (@P10) o.id,
       o.op_id,
       o.resource,
       o.fence,
       o.destination,
       o.idempotency_key,
       o.state,
       o.attempts,
       o.next_attempt_at,
       o.created_at,
       o.finished_at,
       o.last_error,
       o.body_bytes
FROM (
    SELECT r.id,
           r.op_id,
           r.resource,
           r.fence,
           r.destination,
           r.idempotency_key,
           CAST(CASE
                    WHEN q.id IS NULL THEN f.state
                    WHEN q.claimed_by_fence IS NULL THEN 'pending'
                    ELSE 'in_flight'
                END AS varchar(16)) AS state,
           COALESCE(q.attempts, f.attempts) AS attempts,
           COALESCE(q.next_attempt_at, f.next_attempt_at) AS next_attempt_at,
           r.created_at,
           f.finished_at,
           CASE WHEN q.id IS NULL THEN f.last_error ELSE q.last_error END AS last_error,
           (SELECT m.body_bytes FROM dbo.outbox_request_meta AS m WHERE m.id = r.id) AS body_bytes
    FROM dbo.outbox_requests AS r
    LEFT JOIN dbo.outbox_queue AS q ON q.id = r.id
    LEFT JOIN dbo.outbox_finished AS f ON f.id = r.id
    WHERE q.id IS NOT NULL OR f.id IS NOT NULL
) AS o
WHERE (@P1 IS NULL OR o.state IN (SELECT CAST(s.value AS varchar(16)) AS state
                                  FROM OPENJSON(@P1) AS s))
  AND (@P2 = 0 OR o.id IN (SELECT a.id
                           FROM dbo.outbox_finished AS a
                           WHERE a.state IN ('dead', 'cancelled', 'superseded')))
  AND (@P11 = 0 OR o.id IN (SELECT u.id FROM dbo.outbox_queue AS u))
  AND (@P3 IS NULL OR (o.destination = CAST(@P3 AS varchar(64))
                       AND DATALENGTH(o.destination) = DATALENGTH(CAST(@P3 AS varchar(64)))))
  AND (@P4 IS NULL OR (o.resource = @P4 AND DATALENGTH(o.resource) = DATALENGTH(@P4)))
  AND (@P5 IS NULL OR (o.idempotency_key = CAST(@P5 AS varchar(255))
                       AND DATALENGTH(o.idempotency_key)
                           = DATALENGTH(CAST(@P5 AS varchar(255)))))
  AND (@P6 IS NULL OR o.destination IN (
        SELECT CAST(d.value AS varchar(64)) COLLATE Latin1_General_100_BIN2 AS destination
        FROM OPENJSON(@P6) AS d))
  AND (@P7 IS NULL OR o.created_at >= @P7)
  AND (@P8 IS NULL OR o.created_at < @P8)
  AND (@P9 IS NULL OR o.id < @P9)
ORDER BY o.id DESC
OPTION (RECOMPILE);
