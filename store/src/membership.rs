//! Dispatcher membership: each dispatcher process registers an instance row and heartbeats it
//! on the database clock; an instance whose heartbeat is older than its ttl is gone. The rows
//! are what processes and operators see of each other (`outboxctl status`); sharing the
//! partitions between the live instances builds on them.

use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::error::InvalidInput;

/// The longest host name an instance row holds, in characters.
pub const HOST_MAX_CHARS: usize = 255;

/// One heartbeat of a dispatcher process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceBeat {
    /// The process's id for this run, fresh at every start.
    pub instance_id: Uuid,
    /// Where it runs, as the machine names itself.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// How long one heartbeat vouches for it (its lease TTL).
    pub ttl: Duration,
    /// Its `dispatcher.partitions`.
    pub partitions: u32,
    /// How many of those partitions it leads now.
    pub led: u32,
}

impl InstanceBeat {
    /// Checks what the table checks, so a bad value is a typed error, not a refused statement:
    /// a host of 1..=255 characters without control characters, a ttl of 1 ms..=1 day, 1..=1024
    /// partitions and no more led than served.
    pub fn check(&self) -> Result<(), InvalidInput> {
        let chars = self.host.chars().count();
        if chars == 0 || chars > HOST_MAX_CHARS {
            return Err(InvalidInput::new(
                "host",
                format!("must be 1..={HOST_MAX_CHARS} characters, got {chars}"),
            ));
        }
        if self.host.chars().any(char::is_control) {
            return Err(InvalidInput::new("host", "contains a control character"));
        }
        if self.ttl < Duration::from_millis(1) || self.ttl > Duration::from_secs(86_400) {
            return Err(InvalidInput::new("ttl", "must be 1ms..=1 day"));
        }
        if self.partitions == 0 || self.partitions > 1024 {
            return Err(InvalidInput::new("partitions", "must be 1..=1024"));
        }
        if self.led > self.partitions {
            return Err(InvalidInput::new(
                "led",
                "cannot be more than the partitions served",
            ));
        }
        Ok(())
    }

    /// The ttl in whole milliseconds, as stored (bounded by [`InstanceBeat::check`]).
    pub(crate) fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A registered dispatcher process, as read back by the database clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceRow {
    /// Its id for this run.
    pub instance_id: Uuid,
    /// Where it runs.
    pub host: String,
    /// Its process id.
    pub pid: i64,
    /// When it registered.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// Its `dispatcher.partitions`.
    pub partitions: u32,
    /// How many partitions it led at its last heartbeat.
    pub led: u32,
    /// Whether its last heartbeat still vouches for it.
    pub live: bool,
    /// How long ago its last heartbeat was, in milliseconds.
    pub heartbeat_age_ms: i64,
}

/// How long a silent instance's row is kept past its ttl before a heartbeat of another
/// instance deletes it: long enough for operators to see that it went.
pub const FORGET_GONE_AFTER: Duration = Duration::from_secs(24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    fn beat() -> InstanceBeat {
        InstanceBeat {
            instance_id: Uuid::nil(),
            host: "worker-1".into(),
            pid: 42,
            ttl: Duration::from_secs(15),
            partitions: 8,
            led: 3,
        }
    }

    #[test]
    fn a_heartbeat_is_checked_as_the_table_would() {
        assert!(beat().check().is_ok());
        let field = |b: InstanceBeat| b.check().unwrap_err().field;
        assert_eq!(
            field(InstanceBeat {
                host: String::new(),
                ..beat()
            }),
            "host"
        );
        assert_eq!(
            field(InstanceBeat {
                host: "h".repeat(256),
                ..beat()
            }),
            "host"
        );
        assert_eq!(
            field(InstanceBeat {
                host: "a\nb".into(),
                ..beat()
            }),
            "host"
        );
        assert_eq!(
            field(InstanceBeat {
                ttl: Duration::ZERO,
                ..beat()
            }),
            "ttl"
        );
        assert_eq!(
            field(InstanceBeat {
                partitions: 0,
                led: 0,
                ..beat()
            }),
            "partitions"
        );
        assert_eq!(field(InstanceBeat { led: 9, ..beat() }), "led");
    }
}
