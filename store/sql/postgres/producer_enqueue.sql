-- The fenced enqueue of one op or a batch for a login holding outbox_producer alone: the
-- function outbox.enqueue_batch (0016_component_roles.sql) runs the batch enqueue statement and
-- the decisions after it with its owner's rights. A rejection (OB001-OB003, kept by the
-- function), a conflict (OB004) or an invalid op (OB005) fails it whole, with nothing written.
-- Parameters: $1 resource, $2 owner id, $3 token, then one array element per op, as
-- op_insert_batch_if_lease_held.sql takes them ($4-$18), and $19 supersede_pending.
-- Returns one row per op, in order: op_id, seq, duplicate, state.
SELECT op_id, seq, duplicate, state
FROM outbox.enqueue_batch($1, $2, $3, $4::uuid[], $5::text[], $6::text[], $7::bytea[],
                          $8::text[], $9::int[], $10::text[], $11::text[], $12::text[],
                          $13::text[], $14::bytea[], $15::bool[], $16::bigint[], $17::text[],
                          $18::text[], $19::bool[])
