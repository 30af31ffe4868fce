-- Before a destination's row is locked: a destination without one gets it (closed, never
-- failed), so the lock always finds a row. The probe reads WITH (UPDLOCK, HOLDLOCK): two
-- callers of one new destination serialise instead of failing on the primary key.
-- Parameters: @P1 destination (varchar).
SET NOCOUNT ON;
IF NOT EXISTS (SELECT 1 FROM dbo.outbox_destinations WITH (UPDLOCK, HOLDLOCK)
               WHERE destination = @P1)
    INSERT INTO dbo.outbox_destinations (destination) VALUES (@P1);
