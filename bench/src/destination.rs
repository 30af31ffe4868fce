//! The slow destination of `dispatch --instances` (this binary's hidden `serve-delay`, in its
//! own process): 204 to every request after a fixed delay, keeping what it saw — the most
//! requests in progress at once and every arrival time — for `GET /_bench/seen`; and the
//! figures the benchmark draws from that: the steady rate, the busiest second, the excess over
//! a rate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::dispatch::{Process, destination_process};

/// Where what it saw is read: a path no op of the benchmark uses, and not counted itself.
const SEEN_PATH: &str = "/_bench/seen";

const SECOND: Duration = Duration::from_secs(1);

/// What the destination saw, as `GET /_bench/seen` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Seen {
    /// Most requests in progress at once (from arrival until the answer is sent).
    pub(crate) peak_in_flight: usize,
    /// Every request's arrival, in microseconds since the destination started, sorted.
    arrivals_us: Vec<u64>,
}

impl Seen {
    /// Requests received.
    pub(crate) fn requests(&self) -> usize {
        self.arrivals_us.len()
    }

    /// Past the first second of arrivals, requests per second and the busiest one-second
    /// window; `None` when less than a second of arrivals follows it. A rate limit lets its
    /// saved-up burst out at the start (a second's worth); past it, while a backlog waits,
    /// a second holds about the rate.
    pub(crate) fn steady(&self) -> Option<(f64, usize)> {
        let from = self.arrivals_us.first()? + 1_000_000;
        let after = &self.arrivals_us[self.arrivals_us.partition_point(|a| *a < from)..];
        let span = after.last()?.saturating_sub(from);
        (span >= 1_000_000).then(|| {
            let rps = after.len() as f64 / (span as f64 / 1e6);
            (rps, busiest_window(after, SECOND))
        })
    }

    /// The most requests seen above `rate` per second over any stretch of arrivals: the
    /// largest `(j - i + 1) - rate × (t_j - t_i)` over `i <= j`. Traffic a limiter of that
    /// rate lets through (a token bucket, GCRA) has at most the limiter's burst.
    pub(crate) fn excess_over(&self, rate: f64) -> f64 {
        let per_us = rate / 1e6;
        let mut lowest = f64::INFINITY;
        let mut most = 0.0_f64;
        for (i, t) in self.arrivals_us.iter().enumerate() {
            let f = i as f64 - per_us * *t as f64;
            lowest = lowest.min(f);
            most = most.max(f + 1.0 - lowest);
        }
        most
    }
}

#[derive(Debug)]
struct Tally {
    started: Instant,
    delay: Duration,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    /// Microseconds since `started`, in the order they were stamped (not quite sorted).
    arrivals_us: Mutex<Vec<u64>>,
}

/// One request in progress, counted out when dropped (also when the client gives up).
struct InFlight<'a>(&'a Tally);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The destination process: answers 204 after `delay_ms` to everything on `port`.
pub(crate) async fn serve_delay(port: u16, delay_ms: u64) -> anyhow::Result<()> {
    let tally = Arc::new(Tally {
        started: Instant::now(),
        delay: Duration::from_millis(delay_ms),
        in_flight: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
        arrivals_us: Mutex::new(Vec::with_capacity(1 << 16)),
    });
    let app = axum::Router::new()
        .route(SEEN_PATH, axum::routing::get(seen_answer))
        .fallback(delayed_answer)
        .with_state(tally);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}

async fn delayed_answer(State(tally): State<Arc<Tally>>) -> StatusCode {
    let at = u64::try_from(tally.started.elapsed().as_micros()).unwrap_or(u64::MAX);
    let now = tally.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let _counted = InFlight(&tally);
    tally.peak.fetch_max(now, Ordering::SeqCst);
    tally.arrivals_us.lock().expect("arrivals").push(at);
    tokio::time::sleep(tally.delay).await;
    StatusCode::NO_CONTENT
}

async fn seen_answer(State(tally): State<Arc<Tally>>) -> axum::Json<Seen> {
    let mut arrivals_us = tally.arrivals_us.lock().expect("arrivals").clone();
    arrivals_us.sort_unstable();
    axum::Json(Seen {
        peak_in_flight: tally.peak.load(Ordering::SeqCst),
        arrivals_us,
    })
}

/// The most of the `sorted` times (microseconds) that fall in one window `[t, t + window)`.
fn busiest_window(sorted: &[u64], window: Duration) -> usize {
    let window = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
    let (mut best, mut lo) = (0, 0);
    for (hi, at) in sorted.iter().enumerate() {
        while at - sorted[lo] >= window {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// Starts a `serve-delay` process answering after `delay`; returns it and its base URL.
pub(crate) async fn start(delay: Duration) -> anyhow::Result<(Process, String)> {
    let delay_ms = delay.as_millis().to_string();
    destination_process(&["serve-delay", "--delay-ms", &delay_ms]).await
}

/// What the destination at `base_url` has seen so far.
pub(crate) async fn seen(base_url: &str) -> anyhow::Result<Seen> {
    let body = reqwest::get(format!("{base_url}{SEEN_PATH}"))
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    serde_json::from_slice(&body).context("what the destination saw")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(ms: impl IntoIterator<Item = u64>) -> Seen {
        let mut arrivals_us: Vec<u64> = ms.into_iter().map(|m| m * 1000).collect();
        arrivals_us.sort_unstable();
        Seen {
            peak_in_flight: 1,
            arrivals_us,
        }
    }

    #[test]
    fn the_busiest_window_is_half_open() {
        let us = |ms: &[u64]| ms.iter().map(|m| m * 1000).collect::<Vec<_>>();
        assert_eq!(
            busiest_window(&us(&[0, 100, 999, 1000, 1500, 1998]), SECOND),
            4
        );
        assert_eq!(busiest_window(&us(&[0, 1000, 2000]), SECOND), 1);
        assert_eq!(busiest_window(&[], SECOND), 0);
    }

    /// A burst of 50 at once, then one every 10 ms for 3 s: 100/s.
    fn burst_then_100_per_s() -> Seen {
        seen(std::iter::repeat_n(5, 50).chain((1..=300).map(|i| i * 10)))
    }

    #[test]
    fn the_first_second_is_left_out_of_the_steady_rate() {
        let s = burst_then_100_per_s();
        assert_eq!(s.requests(), 350);
        let (rps, busiest) = s.steady().expect("a steady part");
        assert!((rps - 100.0).abs() < 2.0, "{rps}");
        assert_eq!(busiest, 100);
        assert_eq!(seen([0, 500, 1200, 1800]).steady(), None);
        assert_eq!(seen([]).steady(), None);
    }

    #[test]
    fn the_excess_over_a_rate_is_the_burst_it_needed() {
        let s = burst_then_100_per_s();
        // At 100/s only the burst is extra; at 50/s half of the steady part is too.
        let at_100 = s.excess_over(100.0);
        assert!((50.0..=51.5).contains(&at_100), "{at_100}");
        let at_50 = s.excess_over(50.0);
        assert!((199.0..=201.5).contains(&at_50), "{at_50}");
        assert_eq!(seen([7]).excess_over(1.0), 1.0);
        assert_eq!(seen([]).excess_over(1.0), 0.0);
    }
}
