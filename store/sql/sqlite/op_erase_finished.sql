-- Erase after delivery (dispatcher.erase_after, 0017_content_at_rest.sql): stamp erased_at on
-- up to ?3 delivered, cancelled or superseded ops that finished more than ?1 milliseconds ago
-- and within ?2 milliseconds before that cut-off (NULL: all); op_request_erase.sql then
-- clears their requests' body and header values in the same BEGIN IMMEDIATE transaction.
-- Dead ops are never erased. Uses outbox_finished_at_idx. As in the PostgreSQL file, the
-- conditions are repeated on the rows changed (one writer makes it moot here).
-- Parameters: ?1 age in milliseconds, ?2 window in milliseconds (NULL: no lower bound),
-- ?3 batch size.
-- Returns the row id of each op erased.
UPDATE outbox_finished
SET erased_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE id IN (
    SELECT id FROM outbox_finished
    WHERE state IN ('delivered', 'cancelled', 'superseded')
      AND erased_at IS NULL
      AND finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?1 / 1000.0))
      AND (?2 IS NULL
           OR finished_at >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now',
                                      printf('-%.3f seconds', (?1 + ?2) / 1000.0)))
    LIMIT ?3
)
  AND state IN ('delivered', 'cancelled', 'superseded')
  AND erased_at IS NULL
RETURNING id
