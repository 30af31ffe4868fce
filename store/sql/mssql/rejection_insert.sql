-- Keep a refused enqueue for operators (G4). Never the body or header values.
-- A plain insert: it locks only its own new row.
-- Parameters: @P1 resource, @P2 owner id, @P3 token, @P4 current token (NULL when never
-- leased), @P5 destination, @P6 idempotency key, @P7 stage, @P8 reason.
-- Returns nothing.
INSERT INTO dbo.outbox_rejections (resource, owner_id, fence, current_fence, destination,
                                   idempotency_key, stage, reason)
VALUES (@P1, @P2, @P3, @P4, @P5, @P6, @P7, @P8);
