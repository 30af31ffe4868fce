-- A dispatcher partition says whether it is idle and wants enqueues to notify it.
-- Parameters: $1 partition index, $2 listening.
INSERT INTO outbox_wakeups (partition, listening)
VALUES ($1, $2)
ON CONFLICT (partition) DO UPDATE
    SET listening = EXCLUDED.listening,
        changed_at = clock_timestamp()
