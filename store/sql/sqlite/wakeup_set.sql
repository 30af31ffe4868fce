-- A dispatcher partition says whether it is idle and wants to be woken (SQLite dispatchers
-- poll; the row is kept so operators see the same state on every backend).
-- Parameters: ?1 partition index, ?2 listening.
INSERT INTO outbox_wakeups (partition, listening)
VALUES (?1, ?2)
ON CONFLICT (partition) DO UPDATE
    SET listening = excluded.listening,
        changed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
