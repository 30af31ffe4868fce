//! `sweep`: the dispatcher's throughput and the database's cost per op over a grid of the two
//! settings that decide them, a destination's `max_in_flight` and `claim_batch`, against a
//! destination that answers at once and one that answers after a delay (a third-party API),
//! each point against the documented defaults measured in the same run. What the defaults in
//! `config.default.toml` were chosen from.

use std::time::Duration;

use crate::cost::Cost;
use crate::destination;
use crate::dispatch::{self, Process, Setting};
use crate::report::{Row, median, spread};
use crate::target::Target;

/// The documented defaults (`config.default.toml`): a destination's `max_in_flight`, and
/// `claim_batch`.
const DEFAULT_IN_FLIGHT: u32 = 32;
const DEFAULT_CLAIM_BATCH: u32 = 128;

/// What to sweep.
#[derive(Debug, Clone)]
pub(crate) struct Grid {
    /// The destination's answer delays in ms; 0 is the 204 server that answers at once.
    pub(crate) delays_ms: Vec<u64>,
    /// Destination `max_in_flight` values, each with the default `claim_batch`.
    pub(crate) in_flight: Vec<u32>,
    /// `claim_batch` values, each with the default destination `max_in_flight`.
    pub(crate) claim_batches: Vec<u32>,
    /// Most ops per point; a delayed destination gets what about 10 s of its ideal rate is.
    pub(crate) backlog: usize,
}

/// One point of the grid: a destination's `max_in_flight` and the `claim_batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Point {
    in_flight: u32,
    claim_batch: u32,
}

impl Point {
    /// The dispatcher's configuration at this point.
    fn setting(self) -> Setting {
        Setting::Point {
            destination_in_flight: self.in_flight,
            claim_batch: self.claim_batch,
        }
    }

    /// The most ops per second the in-flight limit allows against a destination answering
    /// after `delay_ms` (Little's law); `None` for one that answers at once.
    fn bound_ops_s(self, delay_ms: u64) -> Option<f64> {
        (delay_ms > 0).then(|| f64::from(self.in_flight) * 1000.0 / delay_ms as f64)
    }
}

impl Grid {
    /// The points, the defaults first (every other point's baseline), each once.
    fn points(&self) -> Vec<Point> {
        let point = |in_flight, claim_batch| Point {
            in_flight,
            claim_batch,
        };
        let mut points = vec![point(DEFAULT_IN_FLIGHT, DEFAULT_CLAIM_BATCH)];
        let more = self
            .in_flight
            .iter()
            .map(|&n| point(n, DEFAULT_CLAIM_BATCH))
            .chain(
                self.claim_batches
                    .iter()
                    .map(|&c| point(DEFAULT_IN_FLIGHT, c)),
            );
        for p in more {
            if !points.contains(&p) {
                points.push(p);
            }
        }
        points
    }

    /// Ops to drain at `point` against a destination answering after `delay_ms`: enough for
    /// about 10 s at the rate its in-flight limit allows, at least 2,000, at most `backlog`.
    fn ops(&self, point: Point, delay_ms: u64) -> usize {
        match point.bound_ops_s(delay_ms) {
            None => self.backlog,
            Some(per_s) => ((per_s * 10.0) as usize).clamp(2_000, self.backlog.max(2_000)),
        }
    }
}

/// Starts the destination for `delay_ms`.
async fn destination(delay_ms: u64) -> anyhow::Result<(Process, String)> {
    if delay_ms == 0 {
        dispatch::destination().await
    } else {
        destination::start(Duration::from_millis(delay_ms)).await
    }
}

/// `sweep` on `target`: every point of `grid` at every delay, `runs` times interleaved.
pub(crate) async fn sweep(target: &Target, runs: usize, grid: &Grid) -> anyhow::Result<Vec<Row>> {
    let points = grid.points();
    let mut rows = Vec::new();
    for &delay_ms in &grid.delays_ms {
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); points.len()];
        let mut costs: Vec<Vec<Cost>> = vec![Vec::new(); points.len()];
        for _ in 0..runs {
            let (server, base_url) = destination(delay_ms).await?;
            for (i, &point) in points.iter().enumerate() {
                let (ops, setting) = (grid.ops(point, delay_ms), point.setting());
                let drained = dispatch::drain(target, ops, setting, (&server, &base_url)).await?;
                eprintln!(
                    "sweep {}: answer after {delay_ms} ms, {}: {ops} ops, {:.0} ops/s",
                    target.label(),
                    setting.name(),
                    drained.ops_per_s
                );
                rates[i].push(drained.ops_per_s);
                costs[i].push(drained.cost);
            }
        }
        let defaults = median(&rates[0]);
        for (i, point) in points.iter().enumerate() {
            let mut extra = Cost::median_extra(&costs[i]);
            if let Some(bound) = point.bound_ops_s(delay_ms) {
                extra.push(("in_flight_bound_ops_s".into(), bound));
            }
            rows.push(Row {
                scenario: "sweep".into(),
                backend: target.label().into(),
                producers: None,
                setting: format!("answer after {delay_ms} ms, {}", point.setting().name()),
                ops_per_s: median(&rates[i]),
                spread: spread(&rates[i]),
                baseline_ops_per_s: defaults,
                baseline: "the defaults, same run".into(),
                ratio: median(&rates[i]) / defaults,
                extra,
            });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Grid {
        Grid {
            delays_ms: vec![0, 20],
            in_flight: vec![8, 32, 128],
            claim_batches: vec![16, 128],
            backlog: 20_000,
        }
    }

    #[test]
    fn the_defaults_come_first_and_no_point_twice() {
        let points = grid().points();
        assert_eq!(
            points[0],
            Point {
                in_flight: 32,
                claim_batch: 128
            }
        );
        assert_eq!(points.len(), 4, "{points:?}");
    }

    #[test]
    fn a_delayed_destination_gets_about_ten_seconds_of_work() {
        let g = grid();
        let at = |n| Point {
            in_flight: n,
            claim_batch: 128,
        };
        assert_eq!(g.ops(at(8), 0), 20_000);
        assert_eq!(g.ops(at(8), 20), 4_000);
        assert_eq!(g.ops(at(1), 1000), 2_000);
        assert_eq!(g.ops(at(128), 20), 20_000);
    }
}
