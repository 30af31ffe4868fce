-- A stretch during which a destination was held (open or paused), once it ended: an op's
-- max_age does not count it.
-- Parameters: $1 destination, $2 held from, $3 held until.
INSERT INTO outbox_destination_holds (destination, held_from, held_until)
VALUES ($1, $2, $3)
