//! `dispatch`, `latency` and `backlog`: the real dispatcher (the `outbox-dispatcher` binary next
//! to this one, in its own process) delivering to a minimal 204 server (this binary's hidden
//! `serve-204`, in another process), against the claim+complete SQL loop without HTTP and against
//! the server's own request rate; enqueue-to-receipt latency at a fixed offered rate; and the
//! claim's cost as the backlog grows.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_producer::{Operation, Outbox};
use outbox_store::request::DEFAULT_MAX_BODY_BYTES;
use outbox_store::{
    AttemptOutcome, ClaimRoom, Completion, NextState, Partition, ResourceName, Store,
};

use crate::cost::{Cost, Meter, measured};
use crate::enqueue::{Layout, insert_plain_batch};
use crate::report::{Row, median, spread};
use crate::target::{Db, Plain, Target, dispatcher_store, store};

/// Ops per claim, for the dispatcher and for the SQL-loop baselines alike.
const CLAIM_BATCH: u32 = 128;

const COUNT_MSSQL: &str =
    "SELECT COUNT_BIG(*) AS n FROM dbo.outbox_ops WHERE state = CAST(@P1 AS varchar(16))";
const CLAIM_PLAIN_MSSQL: &str = include_str!("../sql/mssql/op_claim_plain.sql");
const COMPLETE_PLAIN_MSSQL: &str = include_str!("../sql/mssql/op_complete_plain.sql");

/// The destination process: 204 to everything.
pub(crate) async fn serve_204(port: u16) -> anyhow::Result<()> {
    let app = axum::Router::new().fallback(|| async { axum::http::StatusCode::NO_CONTENT });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}

/// A child process, killed when dropped.
pub(crate) struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    /// Starts `command`; the process is killed when the returned value is dropped.
    pub(crate) fn spawn(command: &mut Command) -> std::io::Result<Process> {
        command.spawn().map(Process)
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }

    /// An error when the process has exited already.
    pub(crate) fn ensure_running(&mut self, what: &str) -> anyhow::Result<()> {
        match self.0.try_wait()? {
            None => Ok(()),
            Some(status) => anyhow::bail!("{what} exited early ({status}); its stderr is above"),
        }
    }

    /// Peak resident memory (VmHWM) in MiB, from /proc.
    pub(crate) fn peak_rss_mib(&self) -> f64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(0.0)
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn wait_for_port(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        anyhow::ensure!(Instant::now() < deadline, "nothing listens on {port}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Starts the 204 destination process; returns it and its base URL.
pub(crate) async fn destination() -> anyhow::Result<(Process, String)> {
    destination_process(&["serve-204"]).await
}

/// Starts this binary with `args` (a hidden destination subcommand) and `--port` on a free
/// port; returns the process and its base URL once it listens.
pub(crate) async fn destination_process(args: &[&str]) -> anyhow::Result<(Process, String)> {
    let port = free_port()?;
    let child = Command::new(std::env::current_exe()?)
        .args(args)
        .args(["--port", &port.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("start the destination ({})", args.join(" ")))?;
    let process = Process(child);
    wait_for_port(port).await?;
    Ok((process, format!("http://127.0.0.1:{port}")))
}

/// How the dispatcher of a `dispatch` run is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setting {
    /// The documented defaults: `claim_batch`, `max_in_flight` and the destination's
    /// `max_in_flight` as `config.default.toml` has them.
    Defaults,
    /// 256 in flight to the destination, claims of CLAIM_BATCH.
    Wide,
    /// A point of the `sweep`: this destination `max_in_flight` and this `claim_batch`, the
    /// process-wide `max_in_flight` as the defaults have it.
    Point {
        destination_in_flight: u32,
        claim_batch: u32,
    },
}

impl Setting {
    fn keys(self) -> String {
        match self {
            Setting::Defaults => String::new(),
            Setting::Wide => format!("claim_batch = {CLAIM_BATCH}\nmax_in_flight = 256\n"),
            Setting::Point { claim_batch, .. } => format!("claim_batch = {claim_batch}\n"),
        }
    }

    fn destination_keys(self) -> String {
        match self {
            Setting::Defaults => String::new(),
            Setting::Wide => "max_in_flight = 256\n".into(),
            Setting::Point {
                destination_in_flight,
                ..
            } => format!("max_in_flight = {destination_in_flight}\n"),
        }
    }

    pub(crate) fn name(self) -> String {
        match self {
            Setting::Defaults => "defaults".into(),
            Setting::Wide => "256 in flight".into(),
            Setting::Point {
                destination_in_flight,
                claim_batch,
            } => format!(
                "destination max_in_flight {destination_in_flight}, claim_batch {claim_batch}"
            ),
        }
    }
}

/// The dispatcher's config file on `db`, delivering `statements` ops to `base_url`.
fn dispatcher_config(
    db: &Db,
    base_url: &str,
    poll: &str,
    setting: Setting,
    config_dir: &tempfile::TempDir,
) -> anyhow::Result<std::path::PathBuf> {
    let path = config_dir.path().join("dispatcher.toml");
    std::fs::write(
        &path,
        format!(
            "[database]\nurl = {:?}\n[dispatcher]\nlisten = \"\"\npoll_interval = {poll:?}\n{}\
             [destinations.statements]\nbase_url = {base_url:?}\ntimeout = \"5s\"\n{}",
            db.url,
            setting.keys(),
            setting.destination_keys(),
        ),
    )?;
    Ok(path)
}

/// Starts the dispatcher binary with the configuration file at `path`.
pub(crate) fn spawn_dispatcher(path: &std::path::Path) -> anyhow::Result<Process> {
    let exe = std::env::current_exe()?.with_file_name("outbox-dispatcher");
    anyhow::ensure!(
        exe.exists(),
        "{} is missing: build it with `cargo build --release -p outbox-dispatcher`",
        exe.display()
    );
    let child = Command::new(exe)
        .arg("--config")
        .arg(path)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()?;
    Ok(Process(child))
}

/// Counts ops in `state` (on PostgreSQL and SQLite from the queue or the finished ops alone,
/// not through the view that joins them to their requests: `instances` polls it during a
/// drain).
pub(crate) async fn count(pool: &Plain, state: &str) -> anyhow::Result<i64> {
    const COUNT_POSTGRES: &str = "SELECT CASE WHEN $1 IN ('pending', 'in_flight') \
         THEN (SELECT count(*) FROM outbox_queue WHERE (claimed_by_fence IS NULL) = ($1 = 'pending')) \
         ELSE (SELECT count(*) FROM outbox_finished WHERE state = $1) END";
    const COUNT_SQLITE: &str = "SELECT CASE WHEN ?1 IN ('pending', 'in_flight') \
         THEN (SELECT count(*) FROM outbox_queue WHERE (claimed_by_fence IS NULL) = (?1 = 'pending')) \
         ELSE (SELECT count(*) FROM outbox_finished WHERE state = ?1) END";
    Ok(match pool {
        Plain::Postgres(p) => {
            sqlx::query_scalar(COUNT_POSTGRES)
                .bind(state)
                .fetch_one(p)
                .await?
        }
        Plain::Sqlite(p) => {
            sqlx::query_scalar(COUNT_SQLITE)
                .bind(state)
                .fetch_one(p)
                .await?
        }
        Plain::Mssql(clients) => {
            let mut c = clients[0].lock().await;
            let row = c.query(COUNT_MSSQL, &[&state]).await?.into_row().await?;
            let row = row.context("the count returned no row")?;
            row.try_get::<i64, _>("n")?.context("the count is NULL")?
        }
    })
}

/// Whether no op is pending or in flight any more; cheap (the queue of unfinished ops), so
/// that polling it costs the database little beside the work measured.
pub(crate) async fn settled(pool: &Plain) -> anyhow::Result<bool> {
    const QUEUED: &str = "SELECT EXISTS (SELECT 1 FROM outbox_queue)";
    Ok(match pool {
        Plain::Postgres(p) => !sqlx::query_scalar::<_, bool>(QUEUED).fetch_one(p).await?,
        Plain::Sqlite(p) => !sqlx::query_scalar::<_, bool>(QUEUED).fetch_one(p).await?,
        Plain::Mssql(_) => count(pool, "pending").await? + count(pool, "in_flight").await? == 0,
    })
}

/// Fills `db` with `n` unordered pending ops, 1,000 per statement.
async fn fill(db: &Db, n: usize) -> anyhow::Result<()> {
    let pool = Plain::connect(db, 2).await?;
    let mut done = 0;
    let mut b = 0;
    while done < n {
        let size = (n - done).min(1_000);
        insert_plain_batch(&pool, b, size, Layout::Unordered).await?;
        done += size;
        b += 1;
    }
    Ok(())
}

/// The claim+complete SQL loop of the dispatcher with no HTTP: claims of CLAIM_BATCH, all completed as
/// delivered in one batch, until `n` ops are done; ops/s.
async fn sql_loop(store: &Store, n: usize) -> anyhow::Result<f64> {
    let partition = Partition::new(0, 1)?;
    let lease = store
        .lease_try_acquire(
            &ResourceName::new(partition.lease_resource())?,
            Duration::from_secs(300),
        )
        .await?
        .context("the partition lease is free")?;
    let destinations = vec!["statements".to_owned()];
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let claimed = store
            .op_claim(
                &lease,
                partition,
                &[ClaimRoom::new("statements", CLAIM_BATCH)],
                &destinations,
                CLAIM_BATCH,
                DEFAULT_MAX_BODY_BYTES,
            )
            .await?;
        anyhow::ensure!(
            !claimed.ops.is_empty(),
            "the backlog ran out after {done} ops"
        );
        let completions: Vec<Completion> = claimed
            .ops
            .iter()
            .map(|op| Completion {
                seq: op.seq,
                op_id: op.op_id,
                attempt: op.attempt,
                started_at: op.claimed_at,
                outcome: AttemptOutcome::Delivered,
                http_status: Some(204),
                error: None,
                excerpt: None,
                next: NextState::Delivered,
                trace_context: None,
            })
            .collect();
        store.op_complete_batch(&lease, &completions).await?;
        done += completions.len();
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    store.lease_release(&lease).await?;
    Ok(rate)
}

/// The plain claim+complete loop on SQL Server (raw tiberius, one client): the queue idiom
/// claims CLAIM_BATCH with READPAST, one transaction completes them all as delivered with
/// their attempt rows, none of the outbox's checks, until `n` ops are done; ops/s.
async fn plain_queue_loop(pool: &Plain, n: usize) -> anyhow::Result<f64> {
    let Plain::Mssql(clients) = pool else {
        anyhow::bail!("the plain queue loop is written in T-SQL only");
    };
    let mut c = clients[0].lock().await;
    let token = 1_i64;
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let claimed = c
            .query(CLAIM_PLAIN_MSSQL, &[&i64::from(CLAIM_BATCH), &token])
            .await?
            .into_first_result()
            .await?;
        anyhow::ensure!(!claimed.is_empty(), "the backlog ran out after {done} ops");
        let ids = claimed
            .iter()
            .map(|r| {
                r.try_get::<i64, _>("id")?
                    .context("a claimed row has no id")
            })
            .collect::<anyhow::Result<Vec<i64>>>()?;
        c.execute(
            COMPLETE_PLAIN_MSSQL,
            &[&serde_json::to_string(&ids)?, &token],
        )
        .await?;
        done += ids.len();
    }
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

/// The destination's own rate: `n` POSTs with 256 in flight, with the dispatcher's client settings.
async fn http_rate(base_url: &str, n: usize) -> anyhow::Result<f64> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(5))
        .build()?;
    let url = format!("{base_url}/v1/statements");
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..256 {
        let (client, url, next) = (client.clone(), url.clone(), next.clone());
        tasks.spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                client
                    .post(&url)
                    .body(r#"{"account":1842}"#)
                    .send()
                    .await?
                    .error_for_status()?;
            }
            Ok::<_, reqwest::Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// What one drain by the dispatcher process measured.
pub(crate) struct Drained {
    /// Ops delivered per second, from the dispatcher's start to the last op settled.
    pub(crate) ops_per_s: f64,
    /// What the drain cost (CPU per process, WAL, the machine limit).
    pub(crate) cost: Cost,
    /// The dispatcher's peak resident memory.
    pub(crate) peak_rss_mib: f64,
}

/// Fills a fresh database of `target` with `backlog` unordered ops and drains it with the
/// dispatcher binary configured by `setting`, into the destination process at `base_url`,
/// metered; fails unless every op was delivered.
pub(crate) async fn drain(
    target: &Target,
    backlog: usize,
    setting: Setting,
    (server, base_url): (&Process, &str),
) -> anyhow::Result<Drained> {
    let db = target.fresh().await?;
    fill(&db, backlog).await?;
    let dir = tempfile::tempdir()?;
    let config = dispatcher_config(&db, base_url, "100ms", setting, &dir)?;
    drain_with(&db, backlog, &config, server.pid()).await
}

/// The `backlog` ops of `db` drained by the dispatcher binary started with `config`, into the
/// destination process `server_pid`, metered; fails unless every op was delivered.
pub(crate) async fn drain_with(
    db: &Db,
    backlog: usize,
    config: &std::path::Path,
    server_pid: u32,
) -> anyhow::Result<Drained> {
    let pool = Plain::connect(db, 1).await?;
    let started = Instant::now();
    let mut process = spawn_dispatcher(config)?;
    let who = [("dispatcher", process.pid()), ("destination", server_pid)];
    let meter = Meter::start(measured(&pool, &who).await, &pool).await;
    while !settled(&pool).await? {
        process.ensure_running("the dispatcher")?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed();
    let cost = meter.stop(backlog, &pool).await;
    let delivered = count(&pool, "delivered").await?;
    anyhow::ensure!(
        delivered == backlog as i64,
        "{delivered} of {backlog} ops were delivered"
    );
    Ok(Drained {
        ops_per_s: backlog as f64 / elapsed.as_secs_f64(),
        cost,
        peak_rss_mib: process.peak_rss_mib(),
    })
}

/// `dispatch`: drain a backlog of `backlog` ops with the real dispatcher, with the defaults
/// and with 256 in flight, each run metered (CPU per process, WAL, the machine limit).
pub(crate) async fn dispatch(
    target: &Target,
    runs: usize,
    backlog: usize,
) -> anyhow::Result<Vec<Row>> {
    let settings = [Setting::Defaults, Setting::Wide];
    let mut ours: Vec<Vec<f64>> = vec![Vec::new(); settings.len()];
    let mut costs: Vec<Vec<Cost>> = vec![Vec::new(); settings.len()];
    let mut rss: Vec<Vec<f64>> = vec![Vec::new(); settings.len()];
    let (mut sql, mut sql_costs, mut http) = (Vec::new(), Vec::new(), Vec::new());
    let mssql = matches!(target, Target::Mssql { .. });
    let mut queue = Vec::new();
    for _ in 0..runs {
        let (server, base_url) = destination().await?;
        http.push(http_rate(&base_url, backlog.min(50_000)).await?);

        let db = target.fresh().await?;
        fill(&db, backlog).await?;
        let pool = Plain::connect(&db, 1).await?;
        let s = dispatcher_store(&db, 4).await?;
        let meter = Meter::start(measured(&pool, &[]).await, &pool).await;
        sql.push(sql_loop(&s, backlog).await?);
        sql_costs.push(meter.stop(backlog, &pool).await);
        s.close().await;

        if mssql {
            let db = target.fresh().await?;
            fill(&db, backlog).await?;
            queue.push(plain_queue_loop(&Plain::connect(&db, 1).await?, backlog).await?);
        }

        for (i, setting) in settings.iter().enumerate() {
            let drained = drain(target, backlog, *setting, (&server, &base_url)).await?;
            ours[i].push(drained.ops_per_s);
            costs[i].push(drained.cost);
            rss[i].push(drained.peak_rss_mib);
        }
    }
    let mut rows = Vec::new();
    for (i, setting) in settings.iter().enumerate() {
        let mut extra = vec![("peak_rss_mib".into(), median(&rss[i]))];
        extra.extend(Cost::median_extra(&costs[i]));
        let row = Row {
            scenario: "dispatch".into(),
            backend: target.label().into(),
            producers: None,
            setting: format!("backlog {backlog}, {}", setting.name()),
            ops_per_s: median(&ours[i]),
            spread: spread(&ours[i]),
            baseline_ops_per_s: median(&sql),
            baseline: "claim+complete SQL loop, no HTTP".into(),
            ratio: median(&ours[i]) / median(&sql),
            extra,
        };
        let http_row = Row {
            setting: format!(
                "backlog {backlog}, {}; baseline: {} requests",
                setting.name(),
                backlog.min(50_000)
            ),
            baseline_ops_per_s: median(&http),
            baseline: "destination's own rate, same client".into(),
            ratio: median(&ours[i]) / median(&http),
            extra: vec![("destination_rps".into(), median(&http))],
            ..row.clone()
        };
        // SQL Server also against a bare READPAST queue: what the outbox's checks cost there.
        let queue_row = mssql.then(|| Row {
            baseline_ops_per_s: median(&queue),
            baseline: "plain T-SQL claim+complete loop (READPAST queue), no HTTP".into(),
            ratio: median(&ours[i]) / median(&queue),
            extra: Vec::new(),
            ..row.clone()
        });
        rows.extend([Some(row), Some(http_row), queue_row].into_iter().flatten());
    }
    // What the SQL loop itself costs the database per op: the floor of the outbox's SQL.
    rows.push(Row {
        scenario: "dispatch".into(),
        backend: target.label().into(),
        producers: None,
        setting: format!("backlog {backlog}, the claim+complete SQL loop alone"),
        ops_per_s: median(&sql),
        spread: spread(&sql),
        baseline_ops_per_s: median(&sql),
        baseline: "itself".into(),
        ratio: 1.0,
        extra: Cost::median_extra(&sql_costs),
    });
    Ok(rows)
}

/// `latency`: ops enqueued at a fixed rate while the dispatcher runs; commit-to-receipt times.
pub(crate) async fn latency(target: &Target, runs: usize, quick: bool) -> anyhow::Result<Vec<Row>> {
    let (rate, seconds) = if quick { (200u32, 3u64) } else { (1_000, 30) };
    let poll = "500ms";
    let (mut p50, mut p99, mut p999, mut max, mut achieved) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let arrivals: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let port = free_port()?;
        let recorder = {
            let arrivals = arrivals.clone();
            let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
                let arrivals = arrivals.clone();
                async move {
                    if let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok())
                    {
                        arrivals
                            .lock()
                            .expect("arrivals")
                            .entry(key.to_owned())
                            .or_insert_with(Instant::now);
                    }
                    axum::http::StatusCode::NO_CONTENT
                }
            });
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
            tokio::spawn(async move { axum::serve(listener, app).await })
        };
        let db = target.fresh().await?;
        let dir = tempfile::tempdir()?;
        let _process = spawn_dispatcher(&dispatcher_config(
            &db,
            &format!("http://127.0.0.1:{port}"),
            poll,
            Setting::Defaults,
            &dir,
        )?)?;
        let outbox = Outbox::from_store(store(&db, 8).await?);
        // Let the dispatcher take its lease and start listening.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let lease = outbox
            .try_acquire("latency", Duration::from_secs(300))
            .await?
            .context("free")?;
        let total = rate as usize * seconds as usize;
        let committed: Arc<Mutex<HashMap<String, Instant>>> =
            Arc::new(Mutex::new(HashMap::with_capacity(total)));
        let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let started = Instant::now();
        // Each op is enqueued on its own task at its tick, so a slow commit does not lower the
        // offered rate (8 pooled connections).
        let mut producers = tokio::task::JoinSet::new();
        for i in 0..total {
            ticker.tick().await;
            let (outbox, lease, committed) = (outbox.clone(), lease.clone(), committed.clone());
            producers.spawn(async move {
                let key = format!("lat-{i}");
                let op = Operation::post("statements", "/v1/statements")
                    .json(&serde_json::json!({"i": i}))
                    .idempotency_key(key.as_str())
                    .unordered()
                    .build()?;
                outbox.enqueue(&lease, &op).await?;
                committed
                    .lock()
                    .expect("commit times")
                    .insert(key, Instant::now());
                Ok::<_, anyhow::Error>(())
            });
        }
        while let Some(done) = producers.join_next().await {
            done??;
        }
        achieved.push(total as f64 / started.elapsed().as_secs_f64());
        let deadline = Instant::now() + Duration::from_secs(60);
        while arrivals.lock().expect("arrivals").len() < total {
            anyhow::ensure!(Instant::now() < deadline, "not every op arrived");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        recorder.abort();
        let arrivals = arrivals.lock().expect("arrivals");
        let committed = committed.lock().expect("commit times");
        let mut ms: Vec<f64> = committed
            .iter()
            .map(|(k, at)| arrivals[k].saturating_duration_since(*at).as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        let pct = |p: f64| ms[((ms.len() as f64 * p) as usize).min(ms.len() - 1)];
        p50.push(pct(0.50));
        p99.push(pct(0.99));
        p999.push(pct(0.999));
        max.push(*ms.last().unwrap_or(&0.0));
    }
    Ok(vec![Row {
        scenario: "latency".into(),
        backend: target.label().into(),
        producers: Some(1),
        setting: format!("{rate}/s for {seconds} s, poll {poll}"),
        ops_per_s: median(&achieved),
        spread: spread(&achieved),
        baseline_ops_per_s: f64::from(rate),
        baseline: "offered rate".into(),
        ratio: median(&achieved) / f64::from(rate),
        extra: vec![
            ("p50_ms".into(), median(&p50)),
            ("p99_ms".into(), median(&p99)),
            ("p99.9_ms".into(), median(&p999)),
            ("max_ms".into(), median(&max)),
        ],
    }])
}

/// `backlog`: per-op claim+complete cost draining the same number of ops from a small and from a
/// large pending backlog, and from a small one with a large delivered history.
pub(crate) async fn backlog(target: &Target, runs: usize, quick: bool) -> anyhow::Result<Vec<Row>> {
    let (small, large, drained) = if quick {
        (1_000, 5_000, 500)
    } else {
        (10_000, 1_000_000, 5_000)
    };
    let mut rows = Vec::new();
    let mut small_cost = Vec::new();
    for (name, pending, history) in [
        ("pending", small, 0),
        ("pending", large, 0),
        ("pending+history", small, large),
    ] {
        let mut costs = Vec::new();
        for _ in 0..runs {
            let db = target.fresh().await?;
            fill(&db, history + pending).await?;
            let s = dispatcher_store(&db, 4).await?;
            if history > 0 {
                // The history: delivered rows the partial indexes must ignore.
                sql_loop(&s, history).await?;
            }
            let rate = sql_loop(&s, drained).await?;
            costs.push(1e6 / rate);
            s.close().await;
        }
        if pending == small && history == 0 {
            small_cost = costs.clone();
        }
        let (cost, base) = (median(&costs), median(&small_cost));
        rows.push(Row {
            scenario: "backlog".into(),
            backend: target.label().into(),
            producers: None,
            setting: format!("{name}: {pending} pending, {history} delivered; {drained} drained"),
            ops_per_s: 1e6 / cost,
            spread: spread(&costs.iter().map(|c| 1e6 / c).collect::<Vec<_>>()),
            baseline_ops_per_s: 1e6 / base,
            baseline: format!("{small} pending, no history"),
            ratio: base / cost,
            extra: vec![
                ("us_per_op".into(), cost),
                ("cost_vs_small".into(), cost / base),
            ],
        });
    }
    Ok(rows)
}
