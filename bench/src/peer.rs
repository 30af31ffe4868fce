//! `peer` (issue 36): the dispatcher side by side with graphile-worker, one PostgreSQL server
//! and one sink for both, a fresh database per round, rounds interleaved (ours, theirs, ours,
//! theirs...): drain rate, PostgreSQL's CPU and each side's own process CPU per 10k ops, WAL
//! bytes per delivered op, and the ratios ours / theirs.

use anyhow::Context as _;
use sqlx::Connection as _;

use crate::cost::Cost;
use crate::dispatch::{self, Drained, Setting};
use crate::graphile::{self, Install};
use crate::report::{Row, median, spread};
use crate::target::Target;

/// The documented destination `max_in_flight` (`config.default.toml`): at it, ours runs with
/// the defaults.
const DEFAULT_IN_FLIGHT: u32 = 32;

/// One pair of settings compared: ours at a destination `max_in_flight`, graphile-worker at a
/// concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pairing {
    /// Ours: the destination's `max_in_flight` (32 is the defaults).
    pub(crate) in_flight: u32,
    /// graphile-worker's concurrency (its local queue is one more).
    pub(crate) concurrency: u32,
}

impl Pairing {
    /// Pairs `in_flight` and `concurrency` by position; an error unless they are equally long.
    pub(crate) fn zip(in_flight: &[u32], concurrency: &[u32]) -> anyhow::Result<Vec<Pairing>> {
        anyhow::ensure!(
            in_flight.len() == concurrency.len() && !in_flight.is_empty(),
            "--in-flight ({}) and --concurrency ({}) pair by position: give as many of each",
            in_flight.len(),
            concurrency.len()
        );
        Ok(in_flight
            .iter()
            .zip(concurrency)
            .map(|(&in_flight, &concurrency)| Pairing {
                in_flight,
                concurrency,
            })
            .collect())
    }

    /// Ours: the defaults at 32, `dispatch`'s 256-in-flight setting at 256, otherwise the
    /// defaults but the destination's `max_in_flight`.
    fn setting(self) -> Setting {
        match self.in_flight {
            DEFAULT_IN_FLIGHT => Setting::Defaults,
            256 => Setting::Wide,
            n => Setting::Point {
                destination_in_flight: n,
                claim_batch: 128,
            },
        }
    }

    fn name(self) -> String {
        let ours = match self.setting() {
            Setting::Defaults => format!("defaults ({DEFAULT_IN_FLIGHT} in flight)"),
            setting => setting.name(),
        };
        format!(
            "ours {ours} vs graphile-worker concurrency {}",
            self.concurrency
        )
    }
}

/// One side's figures over the runs, each the median; or, from [`Figures::over`], ratios.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figures {
    ops_per_s: f64,
    /// PostgreSQL's CPU seconds per 10k ops: the postmaster and all its children.
    postgres_cpu: f64,
    /// The side's own process's CPU seconds per 10k ops (the dispatcher, or Node).
    own_cpu: f64,
    wal_bytes_per_op: f64,
}

impl Figures {
    /// The medians of `drains`, the side's own process being the one named `own`; a figure
    /// that was not measured is NaN.
    fn of(drains: &[Drained], own: &str) -> Figures {
        let each = |f: &dyn Fn(&Drained) -> f64| median(&drains.iter().map(f).collect::<Vec<_>>());
        Figures {
            ops_per_s: each(&|d| d.ops_per_s),
            postgres_cpu: each(&|d| cpu(&d.cost, "postgres")),
            own_cpu: each(&|d| cpu(&d.cost, own)),
            wal_bytes_per_op: each(&|d| d.cost.wal_bytes_per_op.unwrap_or(f64::NAN)),
        }
    }

    /// Each figure of `self` over the same of `other`.
    fn over(self, other: Figures) -> Figures {
        Figures {
            ops_per_s: self.ops_per_s / other.ops_per_s,
            postgres_cpu: self.postgres_cpu / other.postgres_cpu,
            own_cpu: self.own_cpu / other.own_cpu,
            wal_bytes_per_op: self.wal_bytes_per_op / other.wal_bytes_per_op,
        }
    }
}

/// CPU seconds per 10k ops of the process `name` in `cost`; NaN when it was not measured.
fn cpu(cost: &Cost, name: &str) -> f64 {
    cost.cpu_per_10k
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(f64::NAN, |(_, s)| *s)
}

/// `peer` on `target`: every pairing `runs` times, each run a round of ours then one of
/// graphile-worker's per pairing, `backlog` ops each, graphile-worker batching its
/// completions when `batch_delay_ms` is given. The rows, and the side-by-side table.
pub(crate) async fn peer(
    target: &Target,
    runs: usize,
    backlog: usize,
    pairings: &[Pairing],
    batch_delay_ms: Option<u32>,
) -> anyhow::Result<(Vec<Row>, String)> {
    if !matches!(target, Target::Postgres { .. }) {
        println!(
            "peer ({}): not measured: graphile-worker runs on PostgreSQL only",
            target.label()
        );
        return Ok((Vec::new(), String::new()));
    }
    let install = Install::ensure()?;
    let mut ours: Vec<Vec<Drained>> = pairings.iter().map(|_| Vec::new()).collect();
    let mut theirs: Vec<Vec<Drained>> = pairings.iter().map(|_| Vec::new()).collect();
    for run in 0..runs {
        let (server, base_url) = dispatch::destination().await?;
        for (i, pairing) in pairings.iter().enumerate() {
            checkpoint(target).await?;
            let o =
                dispatch::drain(target, backlog, pairing.setting(), (&server, &base_url)).await?;
            checkpoint(target).await?;
            let t = install
                .drain(
                    target,
                    backlog,
                    (pairing.concurrency, batch_delay_ms),
                    (&server, &base_url),
                )
                .await?;
            eprintln!(
                "peer run {}/{runs}, {}: ours {:.0} ops/s, graphile-worker {:.0} ops/s",
                run + 1,
                pairing.name(),
                o.ops_per_s,
                t.ops_per_s
            );
            ours[i].push(o);
            theirs[i].push(t);
        }
    }
    let peer_name = match batch_delay_ms {
        None => format!("graphile-worker {}", install.version),
        Some(ms) => format!(
            "graphile-worker {} (completions batched, {ms} ms)",
            install.version
        ),
    };
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for (i, pairing) in pairings.iter().enumerate() {
        let (o, t) = (
            Figures::of(&ours[i], "dispatcher"),
            Figures::of(&theirs[i], graphile::PROCESS),
        );
        rows.push(row(
            target, backlog, *pairing, &peer_name, &ours[i], &theirs[i],
        ));
        lines.push((pairing.name(), o, t));
    }
    Ok((rows, side_by_side(&peer_name, &lines)))
}

/// The report row of one pairing: ours against graphile-worker as the baseline, each side's
/// cost figures (graphile-worker's prefixed `peer_`) and the cost ratios ours / theirs.
fn row(
    target: &Target,
    backlog: usize,
    pairing: Pairing,
    peer_name: &str,
    ours: &[Drained],
    theirs: &[Drained],
) -> Row {
    let rates = |d: &[Drained]| d.iter().map(|d| d.ops_per_s).collect::<Vec<_>>();
    let rss = |d: &[Drained]| median(&d.iter().map(|d| d.peak_rss_mib).collect::<Vec<_>>());
    let ratio = Figures::of(ours, "dispatcher").over(Figures::of(theirs, graphile::PROCESS));
    let costs = |d: &[Drained]| d.iter().map(|d| d.cost.clone()).collect::<Vec<_>>();
    let mut extra = vec![("peak_rss_mib".to_owned(), rss(ours))];
    extra.extend(Cost::median_extra(&costs(ours)));
    extra.push(("peer_peak_rss_mib".into(), rss(theirs)));
    extra.extend(
        Cost::median_extra(&costs(theirs))
            .into_iter()
            .map(|(k, v)| (format!("peer_{k}"), v)),
    );
    extra.extend([
        ("ratio_cpu_postgres".into(), ratio.postgres_cpu),
        ("ratio_cpu_own_process".into(), ratio.own_cpu),
        ("ratio_wal_bytes_per_op".into(), ratio.wal_bytes_per_op),
    ]);
    Row {
        scenario: "peer".into(),
        backend: target.label().into(),
        producers: None,
        setting: format!("backlog {backlog}, {}", pairing.name()),
        ops_per_s: median(&rates(ours)),
        spread: spread(&rates(ours)),
        baseline_ops_per_s: median(&rates(theirs)),
        baseline: format!(
            "{peer_name}, concurrency {}, localQueue {}",
            pairing.concurrency,
            pairing.concurrency + 1
        ),
        ratio: ratio.ops_per_s,
        extra,
    }
}

/// A markdown table: per pairing, ours, theirs and ours / theirs.
fn side_by_side(peer_name: &str, lines: &[(String, Figures, Figures)]) -> String {
    let mut out = String::from(
        "| setting | side | drain ops/s | PostgreSQL CPU s / 10k ops | own process CPU s / 10k ops | WAL B / op |\n\
         |---|---|---|---|---|---|\n",
    );
    // Ratios with two decimals; rates and bytes whole.
    let cells = |f: Figures, ratio: bool| {
        let whole = if ratio { 2 } else { 0 };
        format!(
            "{:.whole$} | {:.2} | {:.2} | {:.whole$}",
            f.ops_per_s, f.postgres_cpu, f.own_cpu, f.wal_bytes_per_op
        )
    };
    for (name, ours, theirs) in lines {
        out += &format!("| {name} | ours | {} |\n", cells(*ours, false));
        out += &format!("| | {peer_name} | {} |\n", cells(*theirs, false));
        out += &format!(
            "| | ours / theirs | {} |\n",
            cells(ours.over(*theirs), true)
        );
    }
    out
}

/// A CHECKPOINT before each round, so that neither side's drain carries full-page images the
/// other's did not (the SQL loop does the same); only warned about when refused.
async fn checkpoint(target: &Target) -> anyhow::Result<()> {
    let Target::Postgres { admin_url, .. } = target else {
        return Ok(());
    };
    let mut c = sqlx::PgConnection::connect(admin_url)
        .await
        .context("connect to PostgreSQL")?;
    if let Err(e) = sqlx::query("CHECKPOINT").execute(&mut c).await {
        eprintln!("peer: CHECKPOINT refused ({e}); full-page images may land in either side");
    }
    c.close().await.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairings_go_by_position_and_the_default_and_wide_settings_are_dispatchs() {
        let p = Pairing::zip(&[32, 256, 64], &[64, 256, 64]).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].setting(), Setting::Defaults);
        assert_eq!(p[1].setting(), Setting::Wide);
        assert_eq!(
            p[2].setting(),
            Setting::Point {
                destination_in_flight: 64,
                claim_batch: 128
            }
        );
        assert_eq!(
            p[0].name(),
            "ours defaults (32 in flight) vs graphile-worker concurrency 64"
        );
        assert!(Pairing::zip(&[32, 256], &[64]).is_err());
        assert!(Pairing::zip(&[], &[]).is_err());
    }

    fn figures(ops_per_s: f64, postgres_cpu: f64, own_cpu: f64, wal: f64) -> Figures {
        Figures {
            ops_per_s,
            postgres_cpu,
            own_cpu,
            wal_bytes_per_op: wal,
        }
    }

    #[test]
    fn the_table_has_each_side_and_the_ratios() {
        let ours = figures(8000.0, 2.0, 0.5, 3600.0);
        let theirs = figures(4000.0, 4.0, 2.0, 1200.0);
        assert_eq!(ours.over(theirs), figures(2.0, 0.5, 0.25, 3.0));
        let table = side_by_side(
            "graphile-worker 0.18.0",
            &[("defaults vs 64".into(), ours, theirs)],
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert_eq!(
            lines[2],
            "| defaults vs 64 | ours | 8000 | 2.00 | 0.50 | 3600 |"
        );
        assert_eq!(
            lines[3],
            "| | graphile-worker 0.18.0 | 4000 | 4.00 | 2.00 | 1200 |"
        );
        assert_eq!(lines[4], "| | ours / theirs | 2.00 | 0.50 | 0.25 | 3.00 |");
    }

    #[test]
    fn a_process_not_measured_reads_as_nan_not_zero() {
        let cost = Cost {
            cpu_per_10k: vec![("postgres", 1.5), ("dispatcher", 0.25)],
            machine_per_10k: 2.0,
            wal_bytes_per_op: None,
            machine_limit: 1.0,
            ops_per_s: 1.0,
        };
        assert_eq!(cpu(&cost, "dispatcher"), 0.25);
        assert!(cpu(&cost, graphile::PROCESS).is_nan());
        let drained = |ops_per_s| Drained {
            ops_per_s,
            cost: cost.clone(),
            peak_rss_mib: 1.0,
        };
        let f = Figures::of(&[drained(10.0), drained(30.0)], "dispatcher");
        assert_eq!((f.ops_per_s, f.postgres_cpu, f.own_cpu), (20.0, 1.5, 0.25));
        assert!(f.wal_bytes_per_op.is_nan());
    }
}
