//! Results: one row per scenario, backend and setting, with the baseline measured in the same
//! run and the ratio; printed as a markdown table and written as JSON.

use serde::Serialize;

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// The scenario's name.
    pub(crate) scenario: String,
    /// `sqlite`, `postgres`, `mssql`, or `mssql-babelfish` on Babelfish for PostgreSQL.
    pub(crate) backend: String,
    /// Concurrent producers, where it applies.
    pub(crate) producers: Option<u32>,
    /// What this row measured besides the scenario (e.g. the backlog size).
    pub(crate) setting: String,
    /// Median throughput over the runs.
    pub(crate) ops_per_s: f64,
    /// Slowest and fastest run.
    pub(crate) spread: (f64, f64),
    /// The baseline's median throughput, measured in the same runs.
    pub(crate) baseline_ops_per_s: f64,
    /// What the baseline is.
    pub(crate) baseline: String,
    /// ops_per_s / baseline_ops_per_s.
    pub(crate) ratio: f64,
    /// Further figures (latency percentiles, RSS, per-op cost), by name.
    pub(crate) extra: Vec<(String, f64)>,
}

/// The median of `values` (not empty).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Smallest and largest of `values`.
pub(crate) fn spread(values: &[f64]) -> (f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// A markdown table of `rows`.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | backend | producers | setting | ops/s (median) | spread | baseline | baseline ops/s | ratio | other |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let extra: Vec<String> = r.extra.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        out += &format!(
            "| {} | {} | {} | {} | {:.0} | {:.0}–{:.0} | {} | {:.0} | {:.2} | {} |\n",
            r.scenario,
            r.backend,
            r.producers
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into()),
            r.setting,
            r.ops_per_s,
            r.spread.0,
            r.spread.1,
            r.baseline,
            r.baseline_ops_per_s,
            r.ratio,
            extra.join(", ")
        );
    }
    out
}
