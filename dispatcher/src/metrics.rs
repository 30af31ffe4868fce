//! Every metric name in one place, and the Prometheus recorder. Names use the `outbox_` prefix
//! and base units; counters end in `_total`.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Attempts, by `destination` and `outcome` (delivered, failed, unknown).
pub const ATTEMPTS: &str = "outbox_attempts_total";
/// Ops delivered, by `destination`.
pub const DELIVERED: &str = "outbox_delivered_total";
/// Ops that became dead, by `destination`.
pub const DEAD: &str = "outbox_dead_total";
/// Retries scheduled, by `destination`.
pub const RETRIES: &str = "outbox_retries_total";
/// Completions discarded by the database because this dispatcher no longer held the claim or
/// the partition lease (G9); the op's fate is decided by the current leader.
pub const STALE_COMPLETIONS: &str = "outbox_stale_completions_total";
/// Completions the database refused even without their excerpt and error: the op stays in
/// flight until the next leader re-queues it (it is logged with its id).
pub const UNRECORDABLE_COMPLETIONS: &str = "outbox_unrecordable_completions_total";
/// Claimed ops the dispatcher would not send because the row broke a rule (G11), made dead.
pub const INVALID_OPS: &str = "outbox_invalid_ops_total";
/// Partition loops restarted after a panic, by `partition`.
pub const LOOP_PANICS: &str = "outbox_partition_loop_panics_total";
/// Ops re-queued after an older dispatcher left them in flight.
pub const REQUEUED: &str = "outbox_requeued_total";
/// Claims given back unattempted (destination full, rate limited or held, lease window too short;
/// ops claimed ahead when their term ends gracefully).
pub const RELEASED_CLAIMS: &str = "outbox_released_claims_total";
/// Attempt duration in seconds, by `destination`.
pub const ATTEMPT_DURATION: &str = "outbox_attempt_duration_seconds";
/// Enqueue (commit) to delivery (answer) in seconds, by `destination`.
pub const DELIVERY_LATENCY: &str = "outbox_enqueue_to_delivery_seconds";
/// Attempts this process has in flight now, by `destination`.
pub const IN_FLIGHT: &str = "outbox_attempts_in_flight";
/// Ops claimed ahead of the free slots and held in this process's memory now
/// (`dispatcher.claim_ahead`).
pub const CLAIMED_AHEAD: &str = "outbox_claimed_ahead";
/// Ops pending in the outbox (due or not), from the database.
pub const PENDING_OPS: &str = "outbox_pending_ops";
/// Ops in flight in the outbox (every dispatcher), from the database.
pub const IN_FLIGHT_OPS: &str = "outbox_in_flight_ops";
/// How long the oldest pending op has waited since it was enqueued, in seconds.
pub const OLDEST_PENDING_AGE: &str = "outbox_oldest_pending_age_seconds";
/// Pending ops dropped because their token was no longer the newest (expire_with_generation).
pub const SUPERSEDED: &str = "outbox_superseded_total";
/// Pending ops whose destination is not configured, by `destination` (at most 50 names at a
/// time and 200 over the process's life; later names are counted under `(other)`).
pub const UNROUTED: &str = "outbox_unrouted_ops";
/// 1 while this process leads the `partition`, 0 while standby.
pub const LEADER: &str = "outbox_partition_leader";
/// How many partitions this process leads.
pub const PARTITIONS_LED: &str = "outbox_partitions_led";
/// How many dispatcher processes are live in the membership table (this one included).
pub const INSTANCES: &str = "outbox_dispatcher_instances";
/// Ops purged by retention.
pub const PURGED: &str = "outbox_purged_total";
/// Finished ops whose body and header values were erased (`dispatcher.erase_after`).
pub const ERASED: &str = "outbox_erased_total";
/// Database errors seen by the loop, by `operation` (a [`DbCall`]).
pub const DB_ERRORS: &str = "outbox_database_errors_total";
/// Enqueues refused (stale, expired or no lease) in the last hour, from the database.
pub const REJECTIONS_LAST_HOUR: &str = "outbox_enqueue_rejections_last_hour";
/// Finished spans never exported (`telemetry`): the export queue was full, the collector did
/// not take their batch in time, or they ended after shutdown. Delivery never waits for export.
pub const TRACE_SPANS_DROPPED: &str = "outbox_trace_spans_dropped_total";

/// 1 for a destination's current state (closed, open, half_open, paused), 0 for the others,
/// as every dispatcher reads it from the database; until this process has read it (it started
/// during a database outage), `unknown` is 1 and no other state is published (issue 34): a
/// guessed `closed` would clear the alerts of a destination that is open or paused.
pub const DESTINATION_STATE: &str = "outbox_destination_state";
/// State changes of destinations this process made (breaker opened, probed, closed), by
/// destination and new state; pauses and resumes are in the admin log.
pub const DESTINATION_TRANSITIONS: &str = "outbox_destination_transitions_total";
/// Every state `DESTINATION_STATE` is labelled with once it was read (and every state
/// `DESTINATION_TRANSITIONS` counts).
pub const DESTINATION_STATES: [&str; 4] = ["closed", "open", "half_open", "paused"];
/// The `DESTINATION_STATE` label of a destination whose state this process has not read yet.
pub const UNKNOWN_STATE: &str = "unknown";

/// The database calls whose failures [`DB_ERRORS`] counts, by the `operation` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbCall {
    /// Trying for a partition lease.
    AcquireLease,
    /// Recording the partition count on a won lease.
    RecordPartitionCount,
    /// Re-queueing what older tokens left in flight.
    RequeueAbandoned,
    /// Claiming due ops.
    Claim,
    /// Reading when the next op is due.
    NextDue,
    /// Asking for (or declining) enqueue notifications.
    SetWakeUp,
    /// Giving back a claim that was not attempted.
    ReleaseClaim,
    /// Recording completions.
    Complete,
    /// The membership heartbeat.
    Heartbeat,
    /// Reading or changing destinations' breaker state.
    DestinationHealth,
}

impl DbCall {
    /// Every call, for registering their series at start.
    pub const ALL: [DbCall; 10] = [
        DbCall::AcquireLease,
        DbCall::RecordPartitionCount,
        DbCall::RequeueAbandoned,
        DbCall::Claim,
        DbCall::NextDue,
        DbCall::SetWakeUp,
        DbCall::ReleaseClaim,
        DbCall::Complete,
        DbCall::Heartbeat,
        DbCall::DestinationHealth,
    ];

    /// The `operation` label.
    pub fn as_str(self) -> &'static str {
        match self {
            DbCall::AcquireLease => "acquire partition lease",
            DbCall::RecordPartitionCount => "record the partition count",
            DbCall::RequeueAbandoned => "requeue abandoned ops",
            DbCall::Claim => "claim",
            DbCall::NextDue => "next due",
            DbCall::SetWakeUp => "set wake-up",
            DbCall::ReleaseClaim => "release claim",
            DbCall::Complete => "complete",
            DbCall::Heartbeat => "heartbeat",
            DbCall::DestinationHealth => "destination health",
        }
    }
}

/// Every metric: its name, kind and `# HELP` text.
const HELP: &[(&str, Kind, &str)] = &[
    (
        ATTEMPTS,
        Kind::Counter,
        "Attempts, by destination and outcome (delivered, failed, unknown).",
    ),
    (DELIVERED, Kind::Counter, "Ops delivered, by destination."),
    (
        DEAD,
        Kind::Counter,
        "Ops that became dead (kept for operators), by destination.",
    ),
    (RETRIES, Kind::Counter, "Retries scheduled, by destination."),
    (
        STALE_COMPLETIONS,
        Kind::Counter,
        "Completions discarded because this dispatcher no longer held the claim or the partition lease (G9).",
    ),
    (
        UNRECORDABLE_COMPLETIONS,
        Kind::Counter,
        "Completions the database refused; the op stays in flight until the next leader re-queues it.",
    ),
    (
        INVALID_OPS,
        Kind::Counter,
        "Claimed ops not sent because their row broke a rule (made dead), by destination.",
    ),
    (
        LOOP_PANICS,
        Kind::Counter,
        "Dispatcher loops restarted after a panic, by loop.",
    ),
    (
        REQUEUED,
        Kind::Counter,
        "Ops re-queued after an older dispatcher left them in flight (they may have been sent).",
    ),
    (
        RELEASED_CLAIMS,
        Kind::Counter,
        "Claims given back unattempted (destination full, rate limited or held, lease window too short; ops claimed ahead when their term ends gracefully).",
    ),
    (
        ATTEMPT_DURATION,
        Kind::Histogram,
        "Attempt duration in seconds, by destination.",
    ),
    (
        DELIVERY_LATENCY,
        Kind::Histogram,
        "Enqueue (commit) to delivery (answer) in seconds, by destination.",
    ),
    (
        IN_FLIGHT,
        Kind::Gauge,
        "Attempts this process has in flight now, by destination.",
    ),
    (
        CLAIMED_AHEAD,
        Kind::Gauge,
        "Ops claimed ahead of the free slots and held in this process's memory now (dispatcher.claim_ahead).",
    ),
    (
        PENDING_OPS,
        Kind::Gauge,
        "Ops pending in the outbox (due or not), from the database.",
    ),
    (
        IN_FLIGHT_OPS,
        Kind::Gauge,
        "Ops in flight in the outbox (every dispatcher), from the database.",
    ),
    (
        OLDEST_PENDING_AGE,
        Kind::Gauge,
        "How long the oldest pending op has waited since it was enqueued, in seconds.",
    ),
    (
        SUPERSEDED,
        Kind::Counter,
        "Pending ops dropped because their token was no longer the newest.",
    ),
    (
        UNROUTED,
        Kind::Gauge,
        "Pending ops whose destination is not configured, by destination.",
    ),
    (
        LEADER,
        Kind::Gauge,
        "1 while this process leads the partition, 0 while standby.",
    ),
    (
        PARTITIONS_LED,
        Kind::Gauge,
        "How many partitions this process leads.",
    ),
    (
        INSTANCES,
        Kind::Gauge,
        "Live dispatcher processes in the membership table (this one included).",
    ),
    (PURGED, Kind::Counter, "Finished ops purged by retention."),
    (
        ERASED,
        Kind::Counter,
        "Finished ops whose body and header values were erased (dispatcher.erase_after).",
    ),
    (
        DB_ERRORS,
        Kind::Counter,
        "Database calls that failed (and are retried), by operation.",
    ),
    (
        REJECTIONS_LAST_HOUR,
        Kind::Gauge,
        "Enqueues refused (stale, expired or no lease) in the last hour, from the database.",
    ),
    (
        DESTINATION_STATE,
        Kind::Gauge,
        "1 for each destination's current state (closed, open, half_open, paused), 0 for the others; only unknown = 1 until this process has read it from the database.",
    ),
    (
        DESTINATION_TRANSITIONS,
        Kind::Counter,
        "Destination state changes this process made (breaker opened, probed, closed), by destination and new state.",
    ),
    (
        TRACE_SPANS_DROPPED,
        Kind::Counter,
        "Spans never exported: the export queue was full, the collector did not take them in time, or they ended after shutdown.",
    ),
];

/// A metric's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Gives every metric its `# HELP` text and a series from the start, so dashboards and alerts
/// work before the first event: counters at zero, labelled by each of `destinations` (every
/// outcome), each of the `partitions` partitions' loops and every [`DbCall`]. Registering adds
/// zero and never resets a series (in-process tests start several dispatchers).
pub(crate) fn register(destinations: &[String], partitions: u32) {
    for (name, kind, help) in HELP {
        match kind {
            Kind::Counter => metrics::describe_counter!(*name, *help),
            Kind::Gauge => metrics::describe_gauge!(*name, *help),
            Kind::Histogram => metrics::describe_histogram!(*name, *help),
        }
    }
    use outbox_store::AttemptOutcome as O;
    for d in destinations {
        for outcome in [O::Delivered, O::Failed, O::Unknown] {
            metrics::counter!(ATTEMPTS, "destination" => d.clone(), "outcome" => outcome.as_str())
                .increment(0);
        }
        for name in [DELIVERED, DEAD, RETRIES, INVALID_OPS] {
            metrics::counter!(name, "destination" => d.clone()).increment(0);
        }
        for name in [ATTEMPT_DURATION, DELIVERY_LATENCY] {
            let _ = metrics::histogram!(name, "destination" => d.clone());
        }
        metrics::gauge!(IN_FLIGHT, "destination" => d.clone()).increment(0.0);
        if !shown_states().contains(d) {
            metrics::gauge!(DESTINATION_STATE, "destination" => d.clone(), "state" => UNKNOWN_STATE)
                .set(1.0);
        }
        for state in DESTINATION_STATES {
            metrics::counter!(DESTINATION_TRANSITIONS, "destination" => d.clone(), "to" => state)
                .increment(0);
        }
    }
    for name in [
        STALE_COMPLETIONS,
        UNRECORDABLE_COMPLETIONS,
        REQUEUED,
        RELEASED_CLAIMS,
        SUPERSEDED,
        PURGED,
        ERASED,
        TRACE_SPANS_DROPPED,
    ] {
        metrics::counter!(name).increment(0);
    }
    for name in [
        CLAIMED_AHEAD,
        PENDING_OPS,
        IN_FLIGHT_OPS,
        OLDEST_PENDING_AGE,
        PARTITIONS_LED,
        INSTANCES,
        REJECTIONS_LAST_HOUR,
    ] {
        metrics::gauge!(name).increment(0.0);
    }
    metrics::gauge!(UNROUTED, "destination" => "(other)").increment(0.0);
    for p in 0..partitions {
        metrics::gauge!(LEADER, "partition" => p.to_string()).increment(0.0);
        let lease = format!("{}{p}", outbox_store::Partition::LEASE_PREFIX);
        metrics::counter!(LOOP_PANICS, "loop" => lease).increment(0);
    }
    metrics::counter!(LOOP_PANICS, "loop" => "housekeeping").increment(0);
    for call in DbCall::ALL {
        metrics::counter!(DB_ERRORS, "operation" => call.as_str()).increment(0);
    }
}

/// Publishes `state` (one of [`DESTINATION_STATES`]) as `destination`'s, read from the
/// database or changed by this process: 1 for it, 0 for the other states and for `unknown`.
pub(crate) fn show_destination_state(destination: &str, state: &str) {
    let mut shown = shown_states();
    for s in DESTINATION_STATES {
        let v = if s == state { 1.0 } else { 0.0 };
        metrics::gauge!(DESTINATION_STATE, "destination" => destination.to_owned(), "state" => s)
            .set(v);
    }
    metrics::gauge!(DESTINATION_STATE, "destination" => destination.to_owned(), "state" => UNKNOWN_STATE)
        .set(0.0);
    shown.insert(destination.to_owned());
}

/// The destinations whose state this process has published: [`register`] (again after a
/// partition count change) shows the others as `unknown`, never a state it read as unknown.
fn shown_states() -> std::sync::MutexGuard<'static, HashSet<String>> {
    static SHOWN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let shown = SHOWN.get_or_init(Mutex::default);
    // A panic while holding it leaves a consistent set: take it back.
    shown.lock().unwrap_or_else(|p| p.into_inner())
}

/// The histograms' bucket bounds, in seconds: attempts take milliseconds to a timeout,
/// enqueue-to-delivery can take retries and hours.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
    3600.0, 21600.0,
];

/// The process-wide recorder; installed on first use (in-process tests start several
/// dispatchers, and a process has one global recorder).
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Histograms, not summaries: buckets add up across instances in PromQL.
            let recorder = PrometheusBuilder::new()
                .set_buckets(BUCKETS)
                .expect("the buckets are not empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (an embedding application); then
            // this handle renders an empty page rather than stealing it.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 17, item 2: every metric is on the page from the start, with its help text, and
    /// the per-destination ones for each configured destination.
    #[test]
    fn every_metric_is_exported_from_the_start() {
        let handle = handle();
        register(&["ledger".to_owned()], 3);
        let page = handle.render();
        for (name, _, _) in HELP {
            assert!(
                page.contains(&format!("# HELP {name} ")),
                "{name} has no help"
            );
            assert!(
                page.lines()
                    .any(|l| l.starts_with(name) && !l.starts_with('#')),
                "{name} has no series"
            );
        }
        for series in [
            "outbox_attempts_total{destination=\"ledger\",outcome=\"failed\"} 0",
            "outbox_dead_total{destination=\"ledger\"} 0",
            "outbox_partition_leader{partition=\"2\"} 0",
            "outbox_database_errors_total{operation=\"claim\"} 0",
            "outbox_attempt_duration_seconds_count{destination=\"ledger\"} 0",
        ] {
            assert!(page.contains(series), "{series} in\n{page}");
        }
    }

    /// The states `destination` is shown in (its `outbox_destination_state` series at 1).
    fn shown(page: &str, destination: &str) -> Vec<String> {
        let prefix = format!("{DESTINATION_STATE}{{destination=\"{destination}\",state=\"");
        page.lines()
            .filter_map(|l| l.strip_prefix(&prefix)?.split_once("\"} "))
            .filter(|(_, v)| *v == "1")
            .map(|(state, _)| state.to_owned())
            .collect()
    }

    /// Issue 34, item 8: a destination whose state this process has not read is shown as
    /// `unknown` only (it was `closed`, which cleared open-breaker alerts); once its state is
    /// shown, registering again (a partition count change) does not take it back to unknown.
    #[test]
    fn a_destination_state_is_unknown_until_it_was_read() {
        let handle = handle();
        register(&["issue34-unread".to_owned()], 1);
        assert_eq!(shown(&handle.render(), "issue34-unread"), ["unknown"]);
        show_destination_state("issue34-unread", "open");
        register(&["issue34-unread".to_owned()], 1);
        let page = handle.render();
        assert_eq!(shown(&page, "issue34-unread"), ["open"], "{page}");
        assert!(
            page.contains(
                "outbox_destination_state{destination=\"issue34-unread\",state=\"unknown\"} 0"
            ),
            "{page}"
        );
    }
}
