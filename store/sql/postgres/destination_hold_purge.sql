-- Retention of the holds: delete those that ended more than $1 milliseconds ago (the
-- dispatchers read holds back only as far as twice their longest max_age).
-- Parameters: $1 age in milliseconds.
DELETE FROM outbox_destination_holds
WHERE held_until < clock_timestamp() - $1::bigint * interval '1 millisecond'
