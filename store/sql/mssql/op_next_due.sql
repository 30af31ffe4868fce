-- Milliseconds until the next pending op of this partition is due (0 or less: due now), so
-- the drain loop can sleep exactly that long. NULL when nothing is pending.
-- The first match in the queue's due index (IX_outbox_queue_due, in due order) that is not
-- claimed is the earliest; an aggregate would read them all. Destinations are compared in the column's binary
-- collation (COLLATE), never clashing with OPENJSON's. The ops are read plainly: a statement
-- snapshot under READ COMMITTED SNAPSHOT, short shared locks under READ COMMITTED; it only
-- decides how long to sleep, and an enqueue or the next poll wakes the loop anyway.
-- Time is SYSUTCDATETIME(), the database clock (G2).
-- A held destination's ops (paused, or its breaker among @P4 not closed) are left out, as the
-- claim leaves them: they are not due for this loop until the hold ends. As in the claim, the
-- destinations' rows are read WITH (READCOMMITTEDLOCK, READPAST), and one another transaction
-- holds for writing counts as held: this never waits for a breaker's or an operator's write
-- (issue 34).
-- Parameters: @P1 partition count (int), @P2 partition index (int), @P3 configured destinations
-- (nvarchar, a JSON array of strings), @P4 those of them with a breaker (nvarchar, a JSON array).
-- Returns one row always: due_in_ms (bigint, NULL when nothing is pending).
SELECT DATEDIFF_BIG(
           MILLISECOND,
           CAST(SYSUTCDATETIME() AS datetimeoffset(7)),
           (SELECT TOP (1) o.next_attempt_at
            FROM dbo.outbox_queue AS o
            WHERE o.claimed_by_fence IS NULL
              AND o.partition % @P1 = @P2
              AND o.destination IN (
                    SELECT CAST(j.value AS varchar(64)) COLLATE Latin1_General_100_BIN2
                    FROM OPENJSON(@P3) AS j)
              AND NOT EXISTS (
                    SELECT 1
                    FROM dbo.outbox_destinations AS d WITH (NOLOCK)
                    WHERE d.destination COLLATE Latin1_General_100_BIN2 = o.destination
                      AND NOT EXISTS (
                            SELECT 1
                            FROM dbo.outbox_destinations AS f
                                WITH (READCOMMITTEDLOCK, READPAST, ROWLOCK)
                            WHERE f.destination = d.destination
                              AND f.paused_at IS NULL
                              AND (f.state = 'closed'
                                   OR f.destination COLLATE Latin1_General_100_BIN2 NOT IN (
                                        SELECT CAST(k.value AS varchar(64))
                                               COLLATE Latin1_General_100_BIN2
                                        FROM OPENJSON(@P4) AS k))))
            ORDER BY o.next_attempt_at, o.id)) AS due_in_ms;
