-- A stretch during which a destination was held (open or paused), once it ended: an op's
-- max_age does not count it.
-- Parameters: @P1 destination, @P2 held from, @P3 held until (ISO 8601 text with an
-- offset).
SET NOCOUNT ON;
INSERT INTO dbo.outbox_destination_holds (destination, held_from, held_until)
VALUES (@P1, CAST(@P2 AS datetimeoffset(7)), CAST(@P3 AS datetimeoffset(7)));
