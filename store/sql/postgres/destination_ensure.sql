-- Before a destination's row is locked: a destination without one gets it (closed, never
-- failed), so the lock always finds a row.
-- Parameters: $1 destination.
INSERT INTO outbox_destinations (destination)
VALUES ($1)
ON CONFLICT (destination) DO NOTHING
