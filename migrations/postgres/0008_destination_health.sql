-- 0008_destination_health: each destination's circuit breaker and its pause, kept in the
-- database so that every dispatcher instance and outboxctl see one state. A destination with
-- no row is closed and never failed. While a destination is open, half-open or paused its
-- pending ops are not claimed (a half-open one lets one probe through); the time it was held
-- is kept in outbox_destination_holds so that the ops' max_age clock does not run meanwhile.
CREATE TABLE outbox_destinations (
    destination           text        NOT NULL PRIMARY KEY,
    -- closed: delivering; open: failing, nothing claimed until next_probe_at; half_open: one
    -- probe op claimed at probe_started_at, its outcome closes or re-opens it.
    state                 text        NOT NULL DEFAULT 'closed',
    -- Failed or unknown attempts since the last healthy answer.
    consecutive_failures  integer     NOT NULL DEFAULT 0,
    -- Openings since it was last closed: each one doubles the cooldown, up to its cap.
    openings              integer     NOT NULL DEFAULT 0,
    opened_at             timestamptz NULL,
    next_probe_at         timestamptz NULL,
    probe_started_at      timestamptz NULL,
    last_error            text        NULL,
    last_failure_at       timestamptz NULL,
    -- Paused by an operator (outboxctl destination pause): never claimed nor probed.
    paused_at             timestamptz NULL,
    paused_by             text        NULL,
    pause_reason          text        NULL,
    changed_at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT outbox_destinations_state CHECK (state IN ('closed', 'open', 'half_open')),
    CONSTRAINT outbox_destinations_name CHECK (destination ~ '^[a-z0-9_-]{1,64}$'),
    CONSTRAINT outbox_destinations_counts CHECK (consecutive_failures >= 0 AND openings >= 0),
    CONSTRAINT outbox_destinations_error_length CHECK (char_length(last_error) <= 2048),
    CONSTRAINT outbox_destinations_pause CHECK ((paused_at IS NULL) = (paused_by IS NULL)
                                                AND (paused_at IS NULL) = (pause_reason IS NULL)),
    CONSTRAINT outbox_destinations_pause_text CHECK (char_length(paused_by) BETWEEN 1 AND 200
                                                     AND char_length(pause_reason) BETWEEN 1 AND 2000)
);

-- When a destination was held (open or paused), once the hold ended: an op's max_age does not
-- count these stretches. The retention purge deletes those older than twice the longest
-- max_age (or the retention, if longer).
CREATE TABLE outbox_destination_holds (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination  text        NOT NULL,
    held_from    timestamptz NOT NULL,
    held_until   timestamptz NOT NULL,
    CONSTRAINT outbox_destination_holds_order CHECK (held_until >= held_from)
);
CREATE INDEX outbox_destination_holds_until_idx ON outbox_destination_holds (held_until);

-- Pauses and resumes are logged with the replays, cancels, purges and partition counts.
ALTER TABLE outbox_admin_log DROP CONSTRAINT outbox_admin_log_action;
ALTER TABLE outbox_admin_log ADD CONSTRAINT outbox_admin_log_action
    CHECK (action IN ('replay', 'cancel', 'purge', 'partitions', 'pause', 'resume'));
