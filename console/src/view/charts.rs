//! The charts' model (`/charts`): the dispatchers' per-minute counts (`outbox_store::stats`)
//! over the last hour or day as server-drawn SVG. Throughput by outcome and the delivery
//! latency's p50 and p99 per destination, the backlog's depth and age, and each destination's
//! held stretches (breaker open or half-open, or paused). Every drawn number is computed here
//! and in `svg.rs` (one chart's axes, scale and points); the template only places it, and each
//! point carries its value as a tooltip (`<title>`) and in a table beside the chart, so the
//! charts read without a mouse and without JavaScript.

use std::collections::BTreeMap;

use outbox_store::health::{DestinationHealth, Hold};
use outbox_store::stats::{BacklogSample, Counts, StatsWindow};
use time::{Duration, OffsetDateTime};

use super::svg::{
    Axis, BOTTOM, Chart, LEFT, Points, Scale, TOP, Tick, WIDTH, chart, clock, latency_label, level,
};
use crate::text;

/// Most destinations charted (the most active first); the table on the overview lists all.
pub(crate) const DESTINATIONS_CHARTED: usize = 12;

/// Which span the charts cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Window {
    /// The last 60 minutes, a point a minute.
    Hour,
    /// The last 24 hours, a point per 15 minutes.
    Day,
}

impl Window {
    /// `hour` or `day`; anything else is `None`.
    pub(crate) fn parse(text: Option<&str>) -> Option<Window> {
        match text {
            None | Some("hour") => Some(Window::Hour),
            Some("day") => Some(Window::Day),
            Some(_) => None,
        }
    }

    /// Its name in links.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "hour",
            Window::Day => "day",
        }
    }

    /// How long one point covers.
    pub(crate) fn bin(self) -> Duration {
        match self {
            Window::Hour => Duration::minutes(1),
            Window::Day => Duration::minutes(15),
        }
    }

    /// How many points.
    fn bins(self) -> usize {
        match self {
            Window::Hour => 60,
            Window::Day => 96,
        }
    }

    /// The first bin's start for a page made at `now`: the bins end with the one holding `now`.
    pub(crate) fn start(self, now: OffsetDateTime) -> OffsetDateTime {
        let bin = self.bin().whole_seconds();
        let secs = now.unix_timestamp();
        let current = secs - secs.rem_euclid(bin);
        let start = current - bin * (self.bins() as i64 - 1);
        OffsetDateTime::from_unix_timestamp(start).unwrap_or(now)
    }

    fn per(self) -> &'static str {
        match self {
            Window::Hour => "per minute",
            Window::Day => "per 15 minutes",
        }
    }
}

/// The charts page.
#[derive(Debug, Clone)]
pub(crate) struct Charts {
    /// `hour` or `day`.
    pub(crate) window: &'static str,
    /// What one point covers, in words.
    pub(crate) per: &'static str,
    /// The links to the windows: (name, href, current).
    pub(crate) windows: Vec<(&'static str, String, bool)>,
    /// The first bin's start and the page's time (RFC 3339).
    pub(crate) from: String,
    pub(crate) until: String,
    /// Whether any dispatcher wrote counts in the window.
    pub(crate) any: bool,
    /// The backlog's depth and age.
    pub(crate) backlog: Chart,
    pub(crate) backlog_age: Chart,
    /// Per destination: throughput and latency.
    pub(crate) destinations: Vec<DestinationCharts>,
    /// How many destinations had counts but are not charted.
    pub(crate) not_charted: usize,
    /// Each destination's held stretches in the window.
    pub(crate) holds: Timeline,
}

/// One destination's charts.
#[derive(Debug, Clone)]
pub(crate) struct DestinationCharts {
    /// Its name.
    pub(crate) name: String,
    /// Its totals in the window.
    pub(crate) delivered: u64,
    pub(crate) retried: u64,
    pub(crate) dead: u64,
    /// Delivered, retried and dead per bin.
    pub(crate) throughput: Chart,
    /// p50 and p99 of the delivered ops' latency per bin.
    pub(crate) latency: Chart,
}

/// The held stretches: a row per destination that was held in the window.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    pub(crate) width: f64,
    pub(crate) height: f64,
    pub(crate) left: f64,
    pub(crate) x_ticks: Vec<Tick>,
    pub(crate) rows: Vec<TimelineRow>,
}

/// One destination's held stretches.
#[derive(Debug, Clone)]
pub(crate) struct TimelineRow {
    pub(crate) name: String,
    pub(crate) y: f64,
    pub(crate) label_y: f64,
    pub(crate) bars: Vec<Bar>,
}

/// One held stretch.
#[derive(Debug, Clone)]
pub(crate) struct Bar {
    pub(crate) x: f64,
    pub(crate) width: f64,
    /// `held` (ended) or the state it is still in (`open`, `half_open`, `paused`).
    pub(crate) class: &'static str,
    pub(crate) title: String,
}

impl Charts {
    /// The charts of `stats` (read from [`Window::start`]) over `window` for a page made at
    /// `now`, with the breaker rows and the ended `holds` for the timeline; `link` makes the
    /// link to a window.
    pub(crate) fn new(
        window: Window,
        now: OffsetDateTime,
        stats: &StatsWindow,
        health: &[DestinationHealth],
        holds: &[(String, Hold)],
        link: impl Fn(Window) -> String,
    ) -> Charts {
        let axis = Axis::new(window.start(now), window.bin(), window.bins());
        // Sum the minutes into bins, per destination.
        let mut per: BTreeMap<&str, Vec<Counts>> = BTreeMap::new();
        for m in &stats.counts {
            let Some(i) = axis.bin_of(m.minute) else {
                continue;
            };
            let bins = per
                .entry(m.destination.as_str())
                .or_insert_with(|| vec![Counts::default(); axis.bins]);
            bins[i].add(&m.counts);
        }
        let mut busiest: Vec<(&str, u64)> = per
            .iter()
            .map(|(name, bins)| {
                let all = bins.iter().map(|c| c.delivered + c.retried + c.dead).sum();
                (*name, all)
            })
            .collect();
        busiest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let not_charted = busiest.len().saturating_sub(DESTINATIONS_CHARTED);
        busiest.truncate(DESTINATIONS_CHARTED);
        busiest.sort_by(|a, b| a.0.cmp(b.0));
        let destinations = busiest
            .iter()
            .enumerate()
            .map(|(n, (name, _))| destination(&axis, window, n, name, &per[name]))
            .collect();
        let (backlog, backlog_age) = backlog(&axis, &stats.backlog);
        Charts {
            window: window.as_str(),
            per: window.per(),
            windows: [Window::Hour, Window::Day]
                .into_iter()
                .map(|w| (w.as_str(), link(w), w == window))
                .collect(),
            from: text::exact(axis.start),
            until: text::exact(now),
            any: !stats.counts.is_empty() || !stats.backlog.is_empty(),
            backlog,
            backlog_age,
            destinations,
            not_charted,
            holds: timeline(&axis, now, health, holds),
        }
    }
}

/// Throughput and latency of destination number `n`, `name`, from its bins.
fn destination(
    axis: &Axis,
    window: Window,
    n: usize,
    name: &str,
    bins: &[Counts],
) -> DestinationCharts {
    let total = |f: fn(&Counts) -> u64| bins.iter().map(f).sum::<u64>();
    let outcome = |name: &'static str, f: fn(&Counts) -> u64| {
        let values: Vec<Option<f64>> = bins.iter().map(|c| Some(f(c) as f64)).collect();
        (name, values)
    };
    let outcomes = [
        outcome("delivered", |c| c.delivered),
        outcome("retried", |c| c.retried),
        outcome("dead", |c| c.dead),
    ];
    let max = outcomes
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .fold(0.0f64, |a, &b| a.max(b));
    let scale = Scale::counts(max);
    let throughput = chart(
        axis,
        format!("throughput-{n}"),
        format!("{name}: ops finished {}", window.per()),
        &scale,
        &outcomes,
        (Points::AboveZero, |v| format!("{v}")),
    );
    let quantile = |q: f64| -> Vec<Option<f64>> {
        bins.iter()
            .map(|c| c.latency_quantile(q).map(level))
            .collect()
    };
    let latency = chart(
        axis,
        format!("latency-{n}"),
        format!("{name}: enqueue to delivery, p50 and p99 {}", window.per()),
        &Scale::latency(),
        &[("p50", quantile(0.5)), ("p99", quantile(0.99))],
        (Points::All, |v| latency_label(v as usize)),
    );
    DestinationCharts {
        name: name.to_owned(),
        delivered: total(|c| c.delivered),
        retried: total(|c| c.retried),
        dead: total(|c| c.dead),
        throughput,
        latency,
    }
}

/// The backlog's depth and its oldest op's age: the largest sample of each bin.
fn backlog(axis: &Axis, samples: &[BacklogSample]) -> (Chart, Chart) {
    let mut pending: Vec<Option<f64>> = vec![None; axis.bins];
    let mut in_flight: Vec<Option<f64>> = vec![None; axis.bins];
    let mut age: Vec<Option<f64>> = vec![None; axis.bins];
    let most = |slot: &mut Option<f64>, v: f64| *slot = Some(slot.map_or(v, |s| s.max(v)));
    for s in samples {
        let Some(i) = axis.bin_of(s.minute) else {
            continue;
        };
        most(&mut pending[i], s.pending as f64);
        most(&mut in_flight[i], s.in_flight as f64);
        most(
            &mut age[i],
            s.oldest_pending_ms.unwrap_or(0).max(0) as f64 / 1000.0,
        );
    }
    let max = pending
        .iter()
        .chain(&in_flight)
        .flatten()
        .fold(0.0f64, |a, &b| a.max(b));
    let depth = chart(
        axis,
        "backlog".to_owned(),
        "Backlog: pending and in-flight ops (the largest sample of each point)".to_owned(),
        &Scale::counts(max),
        &[("pending", pending), ("in_flight", in_flight)],
        (Points::AboveZero, |v| format!("{v}")),
    );
    let oldest = age.iter().flatten().fold(0.0f64, |a, &b| a.max(b));
    let age = chart(
        axis,
        "backlog-age".to_owned(),
        "Backlog: how long the oldest pending op had waited".to_owned(),
        &Scale::seconds(oldest),
        &[("oldest", age)],
        (Points::AboveZero, |v| text::age_ms((v * 1000.0) as i64)),
    );
    (depth, age)
}

/// The held stretches of each destination in the window: the ended ones in `holds`, and the
/// one under way by its breaker row.
fn timeline(
    axis: &Axis,
    now: OffsetDateTime,
    health: &[DestinationHealth],
    holds: &[(String, Hold)],
) -> Timeline {
    let mut bars: BTreeMap<String, Vec<Bar>> = BTreeMap::new();
    let mut bar = |name: &str, from: OffsetDateTime, until: OffsetDateTime, class, what: &str| {
        if until < axis.start || from > now {
            return;
        }
        let (x0, x1) = (axis.x_at(from.max(axis.start)), axis.x_at(until.min(now)));
        let title = format!(
            "{name}: {what} from {} to {} UTC",
            clock(from),
            if until >= now {
                "now".to_owned()
            } else {
                clock(until)
            }
        );
        bars.entry(name.to_owned()).or_default().push(Bar {
            x: x0,
            width: (x1 - x0).max(1.0),
            class,
            title,
        });
    };
    for (name, h) in holds {
        bar(name, h.from, h.until, "held", "held");
    }
    for h in health {
        if let Some(from) = h.held_since() {
            let state = h.shown_state();
            bar(&h.destination, from, now, state, state);
        }
    }
    let rows: Vec<TimelineRow> = bars
        .into_iter()
        .enumerate()
        .map(|(i, (name, bars))| TimelineRow {
            name,
            y: TOP + i as f64 * 22.0,
            label_y: TOP + i as f64 * 22.0 + 13.0,
            bars,
        })
        .collect();
    Timeline {
        width: WIDTH,
        height: TOP + rows.len() as f64 * 22.0 + BOTTOM,
        left: LEFT,
        x_ticks: axis.ticks(),
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_store::stats::MinuteCounts;

    fn at(minutes: i64) -> OffsetDateTime {
        // 2026-12-07 17:00 UTC.
        OffsetDateTime::from_unix_timestamp(1_796_662_800 + minutes * 60).unwrap()
    }

    fn counts(delivered: u64, retried: u64, dead: u64, latency_ms: u64) -> Counts {
        let mut c = Counts {
            retried,
            dead,
            ..Counts::default()
        };
        for _ in 0..delivered {
            c.delivered_after(std::time::Duration::from_millis(latency_ms));
        }
        c
    }

    fn minute(m: i64, destination: &str, c: Counts) -> MinuteCounts {
        MinuteCounts {
            minute: at(m),
            destination: destination.to_owned(),
            counts: c,
        }
    }

    fn link(w: Window) -> String {
        format!("/charts?window={}", w.as_str())
    }

    #[test]
    fn the_hour_has_a_point_a_minute_ending_with_the_current_one() {
        let now = at(90) + Duration::seconds(30);
        assert_eq!(Window::Hour.start(now), at(31));
        assert_eq!(Window::Day.start(now), at(90) - Duration::minutes(15 * 95));
        assert_eq!(Window::parse(Some("week")), None);
        assert_eq!(Window::parse(None), Some(Window::Hour));
    }

    #[test]
    fn points_are_the_counts_of_their_minute_summed_over_the_dispatchers() {
        let now = at(60);
        let stats = StatsWindow {
            counts: vec![
                minute(50, "api", counts(3, 1, 0, 40)),
                // A second dispatcher's row of the same minute.
                minute(50, "api", counts(2, 0, 1, 700)),
                minute(55, "mail", counts(0, 4, 0, 0)),
                // Before the window.
                minute(0, "api", counts(100, 0, 0, 40)),
            ],
            backlog: vec![],
        };
        let c = Charts::new(Window::Hour, now, &stats, &[], &[], link);
        assert_eq!(c.destinations.len(), 2);
        let api = &c.destinations[0];
        assert_eq!(
            (api.name.as_str(), api.delivered, api.retried, api.dead),
            ("api", 5, 1, 1)
        );
        let delivered = &api.throughput.series[0];
        assert_eq!(delivered.points.len(), 1);
        assert_eq!(delivered.points[0].value, "5");
        assert_eq!(delivered.points[0].at, text::exact(at(50)));
        assert!(delivered.points[0].title.contains("17:50 UTC: 5 delivered"));
        // One table row: the minute with counts.
        assert_eq!(
            api.throughput.rows,
            vec![vec![
                text::exact(at(50)),
                "5".into(),
                "1".into(),
                "1".into()
            ]]
        );
        // p50 of (3 at ≤100 ms, 2 at ≤1 s) is ≤100 ms, p99 ≤1 s.
        assert_eq!(
            api.latency.series[0].points[0].title,
            "17:50 UTC: ≤ 100 ms p50"
        );
        assert_eq!(api.latency.series[1].points.len(), 1);
        assert!(api.latency.series[1].points[0].title.contains("≤ 1 s p99"));
        assert_eq!(c.destinations[1].retried, 4);
        assert!(c.any);
    }

    #[test]
    fn a_day_sums_fifteen_minutes_a_point() {
        let now = at(60);
        let stats = StatsWindow {
            counts: vec![
                minute(30, "api", counts(1, 0, 0, 10)),
                minute(44, "api", counts(2, 0, 0, 10)),
                minute(45, "api", counts(4, 0, 0, 10)),
            ],
            backlog: vec![],
        };
        let c = Charts::new(Window::Day, now, &stats, &[], &[], link);
        let values: Vec<&str> = c.destinations[0].throughput.series[0]
            .points
            .iter()
            .map(|p| p.value.as_str())
            .collect();
        assert_eq!(values, ["3", "4"]);
    }

    #[test]
    fn the_backlog_takes_the_largest_sample_of_a_point_and_gaps_stay_gaps() {
        let sample = |m, pending, ms| BacklogSample {
            minute: at(m),
            pending,
            in_flight: 0,
            oldest_pending_ms: ms,
        };
        let stats = StatsWindow {
            counts: vec![],
            backlog: vec![
                sample(40, 7, Some(1500)),
                sample(40, 9, None),
                sample(42, 0, None),
            ],
        };
        let c = Charts::new(Window::Hour, at(60), &stats, &[], &[], link);
        let pending = &c.backlog.series[0];
        assert_eq!(pending.points.len(), 1);
        assert_eq!(pending.points[0].value, "9");
        // Minute 41 has no sample: two lines, not one across the gap.
        assert_eq!(pending.lines.len(), 2);
        assert_eq!(c.backlog_age.series[0].points[0].value, "1.5");
        assert_eq!(c.backlog.y_ticks.last().unwrap().label, "10");
    }

    #[test]
    fn held_stretches_are_bars_on_their_destination_row() {
        let now = at(60);
        let holds = vec![(
            "api".to_owned(),
            Hold {
                from: at(10),
                until: at(20),
            },
        )];
        let mut open = DestinationHealth::closed("mail", at(0));
        open.state = outbox_store::health::BreakerState::Open;
        open.opened_at = Some(at(50));
        let c = Charts::new(
            Window::Hour,
            now,
            &StatsWindow::default(),
            &[open],
            &holds,
            link,
        );
        let rows = &c.holds.rows;
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].name.as_str(), rows[0].bars[0].class),
            ("api", "held")
        );
        assert_eq!(rows[0].bars[0].title, "api: held from 17:10 to 17:20 UTC");
        assert_eq!(rows[1].bars[0].class, "open");
        assert!(rows[1].bars[0].title.ends_with("to now UTC"));
        assert!(!c.any);
    }
}
