//! One chart's geometry for the charts page (`charts.rs`): the time axis of a window's bins, a
//! value scale (counts, seconds, or the latency buckets as levels), and [`chart`], which turns
//! series of values per bin into polylines, points with their tooltips and the table of
//! numbers under the chart, all in SVG units for the templates to place.

use std::fmt::Write as _;

use outbox_store::stats::{LATENCY_BOUNDS_MS, LATENCY_BUCKETS, LatencyBound};
use time::{Duration, OffsetDateTime};

use crate::text;

/// The plot's size in SVG units (the page scales it to its width).
pub(crate) const WIDTH: f64 = 720.0;
pub(crate) const HEIGHT: f64 = 180.0;
/// Room for the axes' labels.
pub(crate) const LEFT: f64 = 64.0;
pub(crate) const RIGHT: f64 = 24.0;
pub(crate) const TOP: f64 = 8.0;
pub(crate) const BOTTOM: f64 = 22.0;

/// One chart: its axes and series, in SVG units.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    /// The element id (letters, digits and `-`).
    pub(crate) id: String,
    /// What it shows.
    pub(crate) title: String,
    pub(crate) width: f64,
    pub(crate) height: f64,
    /// The plot's box: left, right and bottom (the top is the scale's).
    pub(crate) left: f64,
    pub(crate) right: f64,
    pub(crate) bottom: f64,
    pub(crate) y_ticks: Vec<Tick>,
    pub(crate) x_ticks: Vec<Tick>,
    pub(crate) series: Vec<Series>,
    /// The table under the chart: a header and a row per bin with a value.
    pub(crate) columns: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
}

/// An axis label at a position (x for the time axis, y for the value axis).
#[derive(Debug, Clone)]
pub(crate) struct Tick {
    pub(crate) at: f64,
    pub(crate) label: String,
}

/// A line and its points.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Its name in the legend, and a CSS class (`delivered`, `retried`, `dead`, `p50`, …).
    pub(crate) name: &'static str,
    /// The polylines' `points` (one per run of points without a gap).
    pub(crate) lines: Vec<String>,
    pub(crate) points: Vec<Point>,
}

/// A point with its tooltip and value.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub(crate) x: f64,
    pub(crate) y: f64,
    /// The bin's start (RFC 3339).
    pub(crate) at: String,
    /// The value as a number (for `data-value`) and the tooltip.
    pub(crate) value: String,
    pub(crate) title: String,
}

/// The bins of a window, and where each point goes.
pub(crate) struct Axis {
    /// The first bin's start.
    pub(crate) start: OffsetDateTime,
    bin: Duration,
    /// How many bins.
    pub(crate) bins: usize,
}

impl Axis {
    /// `bins` bins of `bin` each from `start`.
    pub(crate) fn new(start: OffsetDateTime, bin: Duration, bins: usize) -> Axis {
        Axis { start, bin, bins }
    }

    pub(crate) fn end(&self) -> OffsetDateTime {
        self.start + self.bin * self.bins as i32
    }

    /// The bin holding `t`, if in the window.
    pub(crate) fn bin_of(&self, t: OffsetDateTime) -> Option<usize> {
        if t < self.start {
            return None;
        }
        let i = ((t - self.start).whole_seconds() / self.bin.whole_seconds()) as usize;
        (i < self.bins).then_some(i)
    }

    pub(crate) fn bin_start(&self, i: usize) -> OffsetDateTime {
        self.start + self.bin * i as i32
    }

    /// The x of the middle of bin `i`.
    pub(crate) fn x(&self, i: usize) -> f64 {
        LEFT + (i as f64 + 0.5) * self.step()
    }

    pub(crate) fn step(&self) -> f64 {
        (WIDTH - LEFT - RIGHT) / self.bins as f64
    }

    /// The x of time `t`, clamped to the plot.
    pub(crate) fn x_at(&self, t: OffsetDateTime) -> f64 {
        let span = (self.end() - self.start).as_seconds_f64();
        let f = ((t - self.start).as_seconds_f64() / span).clamp(0.0, 1.0);
        LEFT + f * (WIDTH - LEFT - RIGHT)
    }

    /// A label every few bins, at the bins' starts: clock times, UTC.
    pub(crate) fn ticks(&self) -> Vec<Tick> {
        let every = (self.bins / 6).max(1);
        (0..=self.bins)
            .step_by(every)
            .map(|i| Tick {
                at: LEFT + i as f64 * self.step(),
                label: clock(self.bin_start(i)),
            })
            .collect()
    }
}

/// How a chart's values map to heights, and its value axis' labels.
pub(crate) struct Scale {
    max: f64,
    ticks: Vec<(f64, String)>,
}

impl Scale {
    /// 0 to a round number at least `max` (1, 2 or 5 times a power of ten).
    pub(crate) fn counts(max: f64) -> Scale {
        let top = nice(max);
        Scale {
            max: top,
            ticks: [0.0, top / 2.0, top]
                .into_iter()
                .map(|v| (v, format!("{v}")))
                .collect(),
        }
    }

    /// 0 to a round number of seconds at least `max`.
    pub(crate) fn seconds(max: f64) -> Scale {
        let top = nice(max);
        Scale {
            max: top,
            ticks: [0.0, top / 2.0, top]
                .into_iter()
                .map(|v| (v, text::age_ms((v * 1000.0) as i64)))
                .collect(),
        }
    }

    /// The latency buckets as evenly spaced levels (a log scale of sorts).
    pub(crate) fn latency() -> Scale {
        Scale {
            max: (LATENCY_BUCKETS - 1) as f64,
            ticks: [0usize, 3, 6, 8, 10, 12]
                .into_iter()
                .map(|l| (l as f64, latency_label(l)))
                .collect(),
        }
    }

    pub(crate) fn y(&self, v: f64) -> f64 {
        let plot = HEIGHT - TOP - BOTTOM;
        let f = if self.max > 0.0 {
            (v / self.max).clamp(0.0, 1.0)
        } else {
            0.0
        };
        TOP + plot * (1.0 - f)
    }
}

/// The smallest of 1, 2 and 5 times a power of ten that is at least `max` (at least 1).
pub(crate) fn nice(max: f64) -> f64 {
    let mut top = 1.0;
    while top < max {
        for f in [2.0, 2.5, 2.0] {
            top *= f;
            if top >= max {
                return top;
            }
        }
    }
    top
}

/// The level of a latency quantile: its bucket's index.
pub(crate) fn level(bound: LatencyBound) -> f64 {
    match bound {
        LatencyBound::Over(_) => (LATENCY_BUCKETS - 1) as f64,
        LatencyBound::AtMost(d) => LATENCY_BOUNDS_MS
            .iter()
            .position(|&ms| u128::from(ms) == d.as_millis())
            .unwrap_or(LATENCY_BUCKETS - 1) as f64,
    }
}

/// `≤ 250 ms`, `≤ 1 min`, `> 1 h`: a latency level in words.
pub(crate) fn latency_label(level: usize) -> String {
    match LATENCY_BOUNDS_MS.get(level) {
        Some(&ms) => format!("≤ {}", short_duration(ms)),
        None => format!(
            "> {}",
            short_duration(LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.len() - 1])
        ),
    }
}

fn short_duration(ms: u64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{} s", ms as f64 / 1000.0),
        ms if ms < 3_600_000 => format!("{} min", ms / 60_000),
        ms => format!("{} h", ms / 3_600_000),
    }
}

/// Which values of a chart are points (a dot with its tooltip, a row of the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Points {
    /// Every value (a latency level: 0 is the first bucket).
    All,
    /// Values above zero (counts: zero is the line's floor).
    AboveZero,
}

impl Points {
    fn keeps(self, v: f64) -> bool {
        self == Points::All || v > 0.0
    }
}

/// A chart of `series` (values per bin, `None` a gap) on `scale`; `label` writes a value.
pub(crate) fn chart(
    axis: &Axis,
    id: String,
    title: String,
    scale: &Scale,
    series: &[(&'static str, Vec<Option<f64>>)],
    (points, label): (Points, impl Fn(f64) -> String),
) -> Chart {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for i in 0..axis.bins {
        if series
            .iter()
            .any(|(_, v)| v[i].is_some_and(|v| points.keeps(v)))
        {
            let mut row = vec![text::exact(axis.bin_start(i))];
            row.extend(
                series
                    .iter()
                    .map(|(_, v)| v[i].map_or("—".to_owned(), &label)),
            );
            rows.push(row);
        }
    }
    let series: Vec<Series> = series
        .iter()
        .map(|(name, values)| {
            let mut lines = Vec::new();
            let mut line = String::new();
            let mut dots = Vec::new();
            for (i, v) in values.iter().enumerate() {
                let Some(v) = *v else {
                    if !line.is_empty() {
                        lines.push(std::mem::take(&mut line));
                    }
                    continue;
                };
                let (x, y) = (axis.x(i), scale.y(v));
                let _ = write!(
                    line,
                    "{}{x:.1},{y:.1}",
                    if line.is_empty() { "" } else { " " }
                );
                if points.keeps(v) {
                    let at = axis.bin_start(i);
                    dots.push(Point {
                        x,
                        y,
                        at: text::exact(at),
                        value: format!("{v}"),
                        title: format!("{} UTC: {} {name}", clock(at), label(v)),
                    });
                }
            }
            if !line.is_empty() {
                lines.push(line);
            }
            Series {
                name,
                lines,
                points: dots,
            }
        })
        .collect();
    let mut columns = vec!["from (UTC)".to_owned()];
    columns.extend(series_names(&series));
    Chart {
        id,
        title,
        width: WIDTH,
        height: HEIGHT,
        left: LEFT,
        right: WIDTH - RIGHT,
        bottom: HEIGHT - BOTTOM,
        y_ticks: scale
            .ticks
            .iter()
            .map(|(v, label)| Tick {
                at: scale.y(*v),
                label: label.clone(),
            })
            .collect(),
        x_ticks: axis.ticks(),
        series,
        columns,
        rows,
    }
}

fn series_names(series: &[Series]) -> Vec<String> {
    series.iter().map(|s| s.name.replace('_', " ")).collect()
}

/// `HH:MM` in UTC.
pub(crate) fn clock(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!("{:02}:{:02}", t.hour(), t.minute())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_tops_are_one_two_or_five_times_a_power_of_ten() {
        let tops: Vec<f64> = [0.0, 1.0, 1.5, 3.0, 7.0, 11.0, 260.0]
            .into_iter()
            .map(nice)
            .collect();
        assert_eq!(tops, [1.0, 1.0, 2.0, 5.0, 10.0, 20.0, 500.0]);
    }
}
