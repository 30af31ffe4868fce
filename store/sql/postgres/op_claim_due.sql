-- Claim due ops of one dispatcher partition for delivery (G8, G9): the function
-- outbox_op_claim_due (0012_claim_room_per_destination.sql) holds the statement and the
-- planner settings it needs, so the session needs none. A destination paused by an operator,
-- or whose breaker (among $8) is not closed, is held: none of its ops is claimed (issue 28).
-- Of each destination at most its room is taken: what it can start now (issue 34).
-- Parameters: $1 partition lease resource, $2 owner id, $3 token, $4 partition count,
-- $5 partition index, $6 configured destinations (text[]), $7 each one's room (int[], in the
-- order of $6), $8 those of them with a breaker (text[]; none for a breaker's probe), $9 how
-- many at most in all, $10 the dispatcher's max_body_bytes.
-- Returns the claimed ops, their attempt number already counted; the body only when it is
-- within $10 (a larger one is never loaded: the dispatcher makes the op dead by body_bytes).
SELECT id, op_id, resource, fence, destination, idempotency_key, method, path, headers,
       content_type, body, body_bytes, attempts, created_at, claimed_at, trace_context,
       trace_state, last_attempt_trace, budget_attempt, budget_since
FROM outbox_op_claim_due($1, $2, $3, $4, $5, $6::text[], $7::integer[], $8::text[], $9, $10)
