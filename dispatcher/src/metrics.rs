//! Every metric name in one place, and the Prometheus recorder. Names use the `outbox_` prefix
//! and base units; counters end in `_total`.

use std::sync::OnceLock;

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
/// Claims given back unattempted (destination full or rate limited, lease window too short).
pub const RELEASED_CLAIMS: &str = "outbox_released_claims_total";
/// Attempt duration in seconds, by `destination`.
pub const ATTEMPT_DURATION: &str = "outbox_attempt_duration_seconds";
/// Enqueue (commit) to delivery (answer) in seconds, by `destination`.
pub const DELIVERY_LATENCY: &str = "outbox_enqueue_to_delivery_seconds";
/// Attempts this process has in flight now, by `destination`.
pub const IN_FLIGHT: &str = "outbox_attempts_in_flight";
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
/// Database errors seen by the loop, by `operation`.
pub const DB_ERRORS: &str = "outbox_database_errors_total";

/// The process-wide recorder; installed on first use (in-process tests start several
/// dispatchers, and a process has one global recorder).
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (an embedding application); then
            // this handle renders an empty page rather than stealing it.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
