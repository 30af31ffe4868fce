//! Housekeeping, every few seconds while the daemon runs: the outbox's gauges, a report of
//! ops waiting for a destination that is not configured, erasure after delivery and the
//! retention purge.

use std::collections::HashSet;
use std::time::Duration;

use outbox_store::Store;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::erase::Eraser;
use crate::metrics as m;

/// Gauges, unrouted-op reports, erasure and retention, every few seconds (at most 10 s, and at
/// least twice per retention or erasure period) until shutdown.
pub(crate) async fn run(store: Store, config: Config, shutdown: CancellationToken) {
    let destinations: Vec<String> = config.destinations.keys().cloned().collect();
    let shortest = config
        .dispatcher
        .erase_after
        .map_or(config.dispatcher.retention, |e| {
            e.min(config.dispatcher.retention)
        });
    let period = (shortest / 2).clamp(Duration::from_secs(1), Duration::from_secs(10));
    let mut unrouted = Unrouted::default();
    let mut eraser = Eraser::default();
    loop {
        match store.op_stats().await {
            Ok(stats) => {
                metrics::gauge!(m::PENDING_OPS).set(stats.pending as f64);
                metrics::gauge!(m::IN_FLIGHT_OPS).set(stats.in_flight as f64);
                let age = stats.oldest_pending_ms.unwrap_or(0).max(0) as f64 / 1000.0;
                metrics::gauge!(m::OLDEST_PENDING_AGE).set(age);
                metrics::gauge!(m::REJECTIONS_LAST_HOUR).set(stats.rejections_last_hour as f64);
            }
            Err(e) => tracing::warn!(error = %e, "could not read the outbox's counts"),
        }
        match store.op_unrouted_list(&destinations, UNROUTED_SHOWN).await {
            Ok(list) => unrouted.report(list),
            Err(e) => tracing::warn!(error = %e, "could not count unrouted ops"),
        }
        if let Some(erase_after) = config.dispatcher.erase_after {
            eraser.pass(&store, erase_after).await;
        }
        purge(&store, &config).await;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}

/// How many unrouted destination names get a gauge of their own, the most waiting first.
/// Names come from producers: without a bound, a hostile or buggy one could grow the metrics
/// and this process's memory without end.
const UNROUTED_SHOWN: u32 = 50;
/// How many names are remembered as warned about; past it, new names are not warned again.
const UNROUTED_WARNED: usize = 1000;
/// How many names ever get a labelled series: the exporter keeps every series it was given,
/// so past this, names that change over time are counted under [`UNROUTED_OTHER`] instead.
const UNROUTED_LABELLED: usize = 200;
/// The `destination` label of the ops of names past [`UNROUTED_LABELLED`].
const UNROUTED_OTHER: &str = "(other)";

/// Destinations with pending ops that are not configured: a gauge each (at most
/// [`UNROUTED_SHOWN`] at a time, [`UNROUTED_LABELLED`] over the process's life), one warning
/// each.
#[derive(Debug, Default)]
struct Unrouted {
    warned: HashSet<String>,
    /// Every name that was given a series of its own.
    labelled: HashSet<String>,
    /// The series set to a non-zero value by the last report.
    reported: HashSet<String>,
}

impl Unrouted {
    fn report(&mut self, list: Vec<(String, i64)>) {
        let mut now: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        for (destination, pending) in &list {
            if self.warned.len() < UNROUTED_WARNED && self.warned.insert(destination.clone()) {
                tracing::warn!(%destination, pending, "ops wait for a destination that is not configured; they are kept, not sent");
            }
            let known = self.labelled.contains(destination)
                || (self.labelled.len() < UNROUTED_LABELLED
                    && self.labelled.insert(destination.clone()));
            let label = if known {
                destination.as_str()
            } else {
                UNROUTED_OTHER
            };
            *now.entry(label.to_owned()).or_default() += pending;
        }
        for gone in self.reported.iter().filter(|d| !now.contains_key(*d)) {
            metrics::gauge!(m::UNROUTED, "destination" => gone.clone()).set(0.0);
        }
        for (label, pending) in &now {
            metrics::gauge!(m::UNROUTED, "destination" => label.clone()).set(*pending as f64);
        }
        self.reported = now.into_keys().collect();
    }
}

/// Deletes finished ops past retention, 1000 at a time, until none are left; then the
/// destinations' holds no dispatcher reads any more.
async fn purge(store: &Store, config: &Config) {
    purge_ops(store, config.dispatcher.retention).await;
    let horizon = crate::health::hold_horizon(config).max(config.dispatcher.retention);
    if let Err(e) = store.destination_hold_purge(horizon).await {
        tracing::warn!(error = %e, "retention purge of destination holds failed");
    }
}

async fn purge_ops(store: &Store, retention: Duration) {
    loop {
        match store.op_purge_finished(retention, 1000).await {
            Ok(n) => {
                metrics::counter!(m::PURGED).increment(n);
                if n < 1000 {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention purge failed");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12, item 7: names of unrouted destinations come from producers; what is kept of
    /// them stays bounded however many there are.
    #[test]
    fn unrouted_names_are_bounded() {
        let mut unrouted = Unrouted::default();
        for round in 0..100 {
            let list = (0..UNROUTED_SHOWN)
                .map(|i| (format!("d{round}-{i}"), 1))
                .collect();
            unrouted.report(list);
        }
        assert!(unrouted.warned.len() <= UNROUTED_WARNED);
        assert!(unrouted.reported.len() <= UNROUTED_SHOWN as usize);
        assert_eq!(unrouted.labelled.len(), UNROUTED_LABELLED);
        assert!(unrouted.reported.contains(UNROUTED_OTHER));
    }
}
