-- Keep a refused enqueue for operators (G4). Never the body or header values.
-- Parameters: $1 resource, $2 owner id, $3 token, $4 current token, $5 destination,
-- $6 idempotency key, $7 stage, $8 reason.
INSERT INTO outbox_rejections (resource, owner_id, fence, current_fence, destination,
                               idempotency_key, stage, reason)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
