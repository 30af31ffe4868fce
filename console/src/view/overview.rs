//! The overview's model: `outboxctl status` (counts by state and destination, oldest pending,
//! due now, dead of the last day, partition leases, instances, the partition count in force),
//! the destinations, and the newest rejections.

use std::collections::BTreeSet;

use outbox_store::admin::Status;
use outbox_store::health::DestinationHealth;
use outbox_store::membership::InstanceRow;
use outbox_store::{LeaseRow, OpState, RejectionRow};

use super::{Count, Links, STATES};
use crate::text::{self, DASH};

/// Rejections the overview lists, newest first.
pub(crate) const REJECTIONS_SHOWN: i64 = 20;

/// What the overview shows.
#[derive(Debug, Clone)]
pub(crate) struct Overview {
    /// Ops of each state, every state listed (zero included), in the order of [`STATES`].
    pub(crate) totals: Vec<Count>,
    /// Ops of every state.
    pub(crate) all_ops: i64,
    /// Dead ops.
    pub(crate) dead_ops: i64,
    /// Every destination configured or holding ops, by name.
    pub(crate) destinations: Vec<DestinationRow>,
    /// How long the oldest pending op has waited, in milliseconds.
    pub(crate) oldest_pending_ms: Option<i64>,
    /// The same, as text ("none pending" when there is none).
    pub(crate) oldest_pending: String,
    /// Pending ops due now.
    pub(crate) due_now: i64,
    /// Ops that died in the last 24 hours.
    pub(crate) dead_last_day: i64,
    /// Stale or expired enqueues rejected in the last hour.
    pub(crate) rejections_last_hour: i64,
    /// Where the dead ops are listed.
    pub(crate) dead_href: String,
    /// Each dispatcher partition's lease: its leader while held.
    pub(crate) partitions: Vec<PartitionRow>,
    /// The partition count in force, who set it, when and why.
    pub(crate) partition_count: String,
    /// Every registered dispatcher process, live or gone.
    pub(crate) instances: Vec<InstanceView>,
    /// How many of them are live.
    pub(crate) live_instances: usize,
    /// The newest rejections.
    pub(crate) rejections: Vec<RejectionView>,
}

/// One destination: its counts by state and whether the dispatcher's config names it.
#[derive(Debug, Clone)]
pub(crate) struct DestinationRow {
    /// Its name, clipped for showing.
    pub(crate) name: String,
    /// Its name as stored: what an operator's pause and resume forms send.
    pub(crate) raw_name: String,
    /// Its ops, newest first.
    pub(crate) href: String,
    /// `yes`, `no` (its ops wait, pending, until it is configured) or `—` (config unknown).
    pub(crate) configured: &'static str,
    /// Its ops of each state, in the order of [`STATES`].
    pub(crate) counts: Vec<Count>,
    /// Its ops of every state.
    pub(crate) total: i64,
    /// Its circuit breaker and pause as the dispatchers share them (`closed` without a row).
    pub(crate) breaker: BreakerView,
}

/// A destination's circuit breaker as the overview shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BreakerView {
    /// `closed`, `open`, `half_open` or `paused`.
    pub(crate) state: &'static str,
    /// Failed or unknown attempts since the last healthy answer.
    pub(crate) failures: u32,
    /// What it says beside the state: the last error, the next probe, who paused it and why.
    pub(crate) detail: String,
}

impl BreakerView {
    fn new(h: Option<&DestinationHealth>) -> BreakerView {
        let Some(h) = h else {
            return BreakerView {
                state: "closed",
                failures: 0,
                detail: String::new(),
            };
        };
        let mut detail = Vec::new();
        if let Some(p) = &h.paused {
            detail.push(format!(
                "paused {} by {}: {}",
                text::relative(p.at),
                text::clip(&p.by, 100),
                text::clip(&p.reason, 200)
            ));
        }
        use outbox_store::health::BreakerState;
        if let (BreakerState::Open, Some(at)) = (h.state, h.next_probe_at) {
            detail.push(format!("next probe {}", text::relative(at)));
        }
        let failing = h.consecutive_failures > 0 || h.state != BreakerState::Closed;
        if let (true, Some(e)) = (failing, &h.last_error) {
            detail.push(format!("last error: {}", text::clip(e, 200)));
        }
        BreakerView {
            state: h.shown_state(),
            failures: h.consecutive_failures,
            detail: detail.join("; "),
        }
    }
}

/// A partition lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionRow {
    /// `dispatcher/<n>`.
    pub(crate) name: String,
    /// Its fencing token (the lease's `fence`).
    pub(crate) token: i64,
    /// `held`, `expired` or `free`.
    pub(crate) state: &'static str,
    /// The leader's owner id (or the last one's once expired).
    pub(crate) owner: String,
    /// When the lease expires or expired, relative.
    pub(crate) expires: String,
    /// The partition count its holder serves.
    pub(crate) serves: String,
}

/// A dispatcher process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstanceView {
    /// Its instance id.
    pub(crate) id: String,
    /// Where it runs.
    pub(crate) host: String,
    /// Its process id.
    pub(crate) pid: i64,
    /// When it registered, relative and exact.
    pub(crate) started: String,
    pub(crate) started_exact: String,
    /// Its last heartbeat, relative.
    pub(crate) heartbeat: String,
    /// `live` or `gone`.
    pub(crate) state: &'static str,
    /// Partitions led of the count it serves: `2/4`.
    pub(crate) led: String,
}

/// A rejected enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RejectionView {
    /// When, relative and exact.
    pub(crate) when: String,
    pub(crate) when_exact: String,
    /// The resource.
    pub(crate) resource: String,
    /// The token presented.
    pub(crate) token: i64,
    /// The resource's newest token then, if known.
    pub(crate) newest: String,
    /// `stale`, `expired` or `no_lease`.
    pub(crate) reason: String,
    /// Which call.
    pub(crate) stage: String,
    /// The op's destination.
    pub(crate) destination: String,
    /// The op's idempotency key, clipped.
    pub(crate) key: String,
}

impl Overview {
    /// The overview of `status`, the destinations' `health` and the newest `rejections`;
    /// `configured` are the destinations of the dispatcher's config, when known.
    pub(crate) fn new(
        status: &Status,
        health: &[DestinationHealth],
        rejections: &[RejectionRow],
        configured: Option<&[String]>,
        links: &Links,
    ) -> Overview {
        let totals: Vec<Count> = STATES
            .iter()
            .map(|&s| Count {
                state: s.as_str(),
                ops: count(status, s.as_str(), None),
                href: links.ops(Some(s), None),
            })
            .collect();
        Overview {
            all_ops: totals.iter().map(|c| c.ops).sum(),
            dead_ops: count(status, OpState::Dead.as_str(), None),
            totals,
            destinations: destinations(status, health, configured, links),
            oldest_pending_ms: status.oldest_pending_ms,
            oldest_pending: status
                .oldest_pending_ms
                .map_or_else(|| "none pending".to_owned(), text::age_ms),
            due_now: status.due_now,
            dead_last_day: status.dead_last_day,
            rejections_last_hour: status.rejections_last_hour,
            dead_href: links.ops(Some(OpState::Dead), None),
            partitions: status.partitions.iter().map(partition).collect(),
            partition_count: partition_count(status),
            live_instances: status.instances.iter().filter(|i| i.live).count(),
            instances: status.instances.iter().map(instance).collect(),
            rejections: rejections.iter().map(rejection).collect(),
        }
    }
}

/// Ops of `state`, at `destination` or at all of them.
fn count(status: &Status, state: &str, destination: Option<&str>) -> i64 {
    status
        .counts
        .iter()
        .filter(|c| c.state == state && destination.is_none_or(|d| c.destination == d))
        .map(|c| c.ops)
        .sum()
}

fn destinations(
    status: &Status,
    health: &[DestinationHealth],
    configured: Option<&[String]>,
    links: &Links,
) -> Vec<DestinationRow> {
    let mut names: BTreeSet<&str> = status
        .counts
        .iter()
        .map(|c| c.destination.as_str())
        .collect();
    names.extend(health.iter().map(|h| h.destination.as_str()));
    names.extend(configured.unwrap_or_default().iter().map(String::as_str));
    names
        .into_iter()
        .map(|name| {
            let counts: Vec<Count> = STATES
                .iter()
                .map(|&s| Count {
                    state: s.as_str(),
                    ops: count(status, s.as_str(), Some(name)),
                    href: links.ops(Some(s), Some(name)),
                })
                .collect();
            DestinationRow {
                name: text::clip(name, 200),
                raw_name: name.to_owned(),
                href: links.ops(None, Some(name)),
                configured: match configured {
                    None => DASH,
                    Some(c) if c.iter().any(|d| d == name) => "yes",
                    Some(_) => "no",
                },
                total: counts.iter().map(|c| c.ops).sum(),
                counts,
                breaker: BreakerView::new(health.iter().find(|h| h.destination == name)),
            }
        })
        .collect()
}

fn partition(l: &LeaseRow) -> PartitionRow {
    PartitionRow {
        name: text::clip(l.resource.as_str(), 200),
        token: l.token.get(),
        state: match (l.held, l.owner_id) {
            (true, _) => "held",
            (false, Some(_)) => "expired",
            (false, None) => "free",
        },
        owner: text::or_dash(l.owner_id),
        expires: l
            .remaining_ms
            .map_or_else(|| DASH.to_owned(), text::relative_ms),
        serves: text::or_dash(l.partitions),
    }
}

fn partition_count(status: &Status) -> String {
    match &status.partition_count {
        Some(c) => format!(
            "{} (set by {} {}: {})",
            c.partitions,
            text::clip(&c.changed_by, 200),
            text::relative(c.changed_at),
            text::clip(&c.reason, 500)
        ),
        None => {
            "none yet (the first dispatcher to start records its dispatcher.partitions)".to_owned()
        }
    }
}

fn instance(i: &InstanceRow) -> InstanceView {
    InstanceView {
        id: i.instance_id.to_string(),
        host: text::clip(&i.host, 200),
        pid: i.pid,
        started: text::relative(i.started_at),
        started_exact: text::exact(i.started_at),
        heartbeat: text::relative_ms(-i.heartbeat_age_ms),
        state: if i.live { "live" } else { "gone" },
        led: format!("{}/{}", i.led, i.partitions),
    }
}

fn rejection(r: &RejectionRow) -> RejectionView {
    RejectionView {
        when: text::relative(r.rejected_at),
        when_exact: text::exact(r.rejected_at),
        resource: text::clip(&r.resource, 200),
        token: r.token.get(),
        newest: text::or_dash(r.current_token),
        reason: text::clip(&r.reason, 100),
        stage: text::clip(&r.stage, 100),
        destination: text::or_dash(r.destination.as_deref()),
        key: text::clip(r.idempotency_key.as_deref().unwrap_or(DASH), 80),
    }
}

#[cfg(test)]
mod tests {
    use outbox_store::admin::StateCount;

    use super::*;

    fn status(counts: &[(&str, &str, i64)]) -> Status {
        Status {
            counts: counts
                .iter()
                .map(|&(state, destination, ops)| StateCount {
                    state: state.into(),
                    destination: destination.into(),
                    ops,
                })
                .collect(),
            oldest_pending_ms: Some(1_500),
            due_now: 1,
            dead_last_day: 2,
            rejections_last_hour: 0,
            partitions: Vec::new(),
            instances: Vec::new(),
            partition_count: None,
        }
    }

    #[test]
    fn every_state_and_every_destination_is_counted_with_zeros_shown() {
        let s = status(&[
            ("delivered", "statements", 3),
            ("dead", "statements", 1),
            ("pending", "invoices", 2),
        ]);
        let configured = ["statements".to_owned(), "billing".to_owned()];
        let o = Overview::new(&s, &[], &[], Some(&configured), &Links::new(""));
        let totals: Vec<(&str, i64)> = o.totals.iter().map(|c| (c.state, c.ops)).collect();
        assert_eq!(
            totals,
            [
                ("pending", 2),
                ("in_flight", 0),
                ("delivered", 3),
                ("dead", 1),
                ("cancelled", 0),
                ("superseded", 0)
            ]
        );
        assert_eq!((o.all_ops, o.dead_ops), (6, 1));
        let rows: Vec<(&str, &str, i64)> = o
            .destinations
            .iter()
            .map(|d| (d.name.as_str(), d.configured, d.total))
            .collect();
        assert_eq!(
            rows,
            [
                ("billing", "yes", 0),
                ("invoices", "no", 2),
                ("statements", "yes", 4)
            ]
        );
        assert_eq!(
            o.destinations[2].counts[3].href,
            "/ops?state=dead&destination=statements"
        );
        assert_eq!(o.destinations[0].breaker.state, "closed");
        assert_eq!(o.oldest_pending, "1.5s");
        assert_eq!(o.dead_href, "/ops?state=dead");
    }

    #[test]
    fn without_the_config_no_destination_is_called_unconfigured() {
        let s = status(&[("pending", "invoices", 2)]);
        let o = Overview::new(&s, &[], &[], None, &Links::new(""));
        assert_eq!(o.destinations.len(), 1);
        assert_eq!(o.destinations[0].configured, "—");
    }
}
