-- 0003_hardening: claims name the partition lease that took them, partition leases say how
-- many partitions their holder serves, and rows obey what the table can check by itself.

-- A claim records the partition lease (resource) beside its token: tokens of different
-- partitions can be equal, so completions, releases and re-queues match both (G9, G12).
ALTER TABLE outbox_ops ADD COLUMN claimed_by_lease text NULL;

-- For dispatcher partition leases: the partition count their holder serves. A dispatcher
-- configured with another count refuses to serve while such a lease is live, since two
-- partition schemes would split the slots differently (G12).
ALTER TABLE outbox_leases ADD COLUMN partitions integer NULL;

-- Rows written by anything but the producer's builder (a SQL writer, a bug, the SQL API) are
-- refused where the table can tell: the path is relative to the destination's base URL (one
-- leading /, visible ASCII, at most 2048 bytes), the body is within the 16 MiB ceiling, the
-- headers are a JSON array. The dispatcher re-checks every rule anyway (G11). NOT VALID then
-- VALIDATE: existing rows are checked without blocking writes for the whole scan.
ALTER TABLE outbox_ops ADD CONSTRAINT outbox_ops_path_format
    CHECK (path ~ '^/[!-~]*$' AND left(path, 2) <> '//' AND octet_length(path) <= 2048) NOT VALID;
ALTER TABLE outbox_ops ADD CONSTRAINT outbox_ops_body_size
    CHECK (octet_length(body) <= 16777216) NOT VALID;
ALTER TABLE outbox_ops ADD CONSTRAINT outbox_ops_headers_array
    CHECK (jsonb_typeof(headers) = 'array') NOT VALID;
ALTER TABLE outbox_ops VALIDATE CONSTRAINT outbox_ops_path_format;
ALTER TABLE outbox_ops VALIDATE CONSTRAINT outbox_ops_body_size;
ALTER TABLE outbox_ops VALIDATE CONSTRAINT outbox_ops_headers_array;
