//! A destination's health as stored (`outbox_destinations`, `outbox_destination_holds`): its
//! breaker's state, an operator's pause, and the stretches it was held. The transitions
//! between these states and their flows are in `health.rs`.

use serde::Serialize;
use time::OffsetDateTime;

use crate::error::InvalidInput;

/// A destination's breaker state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Delivering.
    Closed,
    /// Failing: nothing is claimed until the next probe.
    Open,
    /// One probe op is under way.
    HalfOpen,
}

impl BreakerState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// The state stored as `name`.
    pub fn parse(name: &str) -> Result<BreakerState, InvalidInput> {
        match name {
            "closed" => Ok(BreakerState::Closed),
            "open" => Ok(BreakerState::Open),
            "half_open" => Ok(BreakerState::HalfOpen),
            other => Err(InvalidInput::new(
                "state",
                format!("{other:?} is not closed, open or half_open"),
            )),
        }
    }
}

/// An operator's pause of a destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    /// Since when (database clock).
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Who paused it.
    pub by: String,
    /// Why.
    pub reason: String,
}

/// One destination's row of `outbox_destinations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DestinationHealth {
    /// The destination's name.
    pub destination: String,
    /// The breaker's state.
    pub state: BreakerState,
    /// Failed or unknown attempts since the last healthy answer.
    pub consecutive_failures: u32,
    /// Openings since it was last closed (the cooldown doubles with each).
    pub openings: u32,
    /// When it last opened.
    #[serde(with = "time::serde::rfc3339::option")]
    pub opened_at: Option<OffsetDateTime>,
    /// When an open destination may be probed.
    #[serde(with = "time::serde::rfc3339::option")]
    pub next_probe_at: Option<OffsetDateTime>,
    /// When the probe under way was taken (half-open).
    #[serde(with = "time::serde::rfc3339::option")]
    pub probe_started_at: Option<OffsetDateTime>,
    /// The last failure's error (never a body or header value).
    pub last_error: Option<String>,
    /// When the last failure was recorded.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_failure_at: Option<OffsetDateTime>,
    /// The operator's pause, if paused.
    pub paused: Option<Pause>,
    /// When the row last changed.
    #[serde(with = "time::serde::rfc3339")]
    pub changed_at: OffsetDateTime,
}

impl DestinationHealth {
    /// A destination without a row: closed, never failed.
    pub fn closed(destination: &str, now: OffsetDateTime) -> DestinationHealth {
        DestinationHealth {
            destination: destination.to_owned(),
            state: BreakerState::Closed,
            consecutive_failures: 0,
            openings: 0,
            opened_at: None,
            next_probe_at: None,
            probe_started_at: None,
            last_error: None,
            last_failure_at: None,
            paused: None,
            changed_at: now,
        }
    }

    /// Whether its ops may be claimed as usual: closed and not paused.
    pub fn delivering(&self) -> bool {
        self.state == BreakerState::Closed && self.paused.is_none()
    }

    /// What operators see: `paused`, else the breaker's state.
    pub fn shown_state(&self) -> &'static str {
        if self.paused.is_some() {
            "paused"
        } else {
            self.state.as_str()
        }
    }

    /// Since when it has been held (open, half-open or paused), if it is.
    pub fn held_since(&self) -> Option<OffsetDateTime> {
        let opened = (self.state != BreakerState::Closed)
            .then_some(self.opened_at)
            .flatten();
        let paused = self.paused.as_ref().map(|p| p.at);
        match (opened, paused) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A stretch during which a destination was held, once it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// When it began.
    pub from: OffsetDateTime,
    /// When it ended.
    pub until: OffsetDateTime,
}
