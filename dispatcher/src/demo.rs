//! `outbox-dispatcher demo`: the seed's story, live, with no set-up and no network. Two
//! workers run the month-end account statement job for one account under a short lease; a
//! local HTTP server stands in for the third-party statement API (it cannot check tokens);
//! the real dispatcher delivers. Worker A is paused past its lease, B takes over and its
//! statement is sent, A wakes up and its enqueue is rejected as stale. The demo checks every
//! step and says so; it succeeds only when each expectation held. With `--breaker` a second
//! chapter follows: a ledger API that fails opens its destination's circuit breaker, gets one
//! probe per cooldown, and is delivered to once it answers again. A command of the binary,
//! not of the library: it drives the daemon through the library's public
//! [`outbox_dispatcher::run`].

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::http::{HeaderMap, StatusCode};
use outbox_producer::{Error as ProducerError, Operation, Outbox};
use outbox_store::{Store, StoreOptions, TtlBounds};
use tokio_util::sync::CancellationToken;

use outbox_dispatcher::Config;

/// The resource both workers lease: one account's statement for one month.
const RESOURCE: &str = "statement:account-1842:2026-07";
/// The statement's natural idempotency key: the same whichever worker sends it.
const KEY: &str = "statement-1842-2026-07";

/// The resource and key of one run: as above on a fresh SQLite file; on a database given by
/// URL, which may hold earlier runs, with this run's id appended so the story starts afresh.
struct Names {
    resource: String,
    key: String,
}
/// The workers' lease: short, so the story takes seconds.
const LEASE_TTL: Duration = Duration::from_secs(2);
/// How long each wait may take before the demo calls the step failed.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// A request the stand-in statement API received.
#[derive(Debug, Clone)]
struct Received {
    idempotency_key: String,
    fencing_token: String,
    body: String,
}

/// How the story is told: colour and a live progress line on a terminal, plain lines otherwise.
struct Narrator {
    tty: bool,
    started: Instant,
    checks: Vec<(String, bool)>,
}

impl Narrator {
    fn new() -> Narrator {
        Narrator {
            tty: std::io::stdout().is_terminal(),
            started: Instant::now(),
            checks: Vec::new(),
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.tty {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// One step of the story, stamped with the time since the start.
    fn say(&self, who: &str, text: &str) {
        let colour = match who {
            "A" => "33",
            "B" => "36",
            "API" => "35",
            _ => "1",
        };
        let stamp = format!("{:>5.1}s", self.started.elapsed().as_secs_f64());
        println!(
            "{} {:<10} {text}",
            self.paint("2", &stamp),
            self.paint(colour, who)
        );
    }

    /// A live line while waiting (terminals only), cleared when the wait ends.
    fn progress(&self, text: &str) {
        if self.tty {
            print!("\r\x1b[2K{}", self.paint("2", text));
            let _ = std::io::stdout().flush();
        }
    }

    fn clear(&self) {
        if self.tty {
            print!("\r\x1b[2K");
            let _ = std::io::stdout().flush();
        }
    }

    /// Records an expectation and says whether it held.
    fn check(&mut self, what: &str, held: bool) {
        let mark = if held {
            self.paint("32", "ok  ")
        } else {
            self.paint("31", "FAIL")
        };
        println!("       {mark} {what}");
        self.checks.push((what.to_owned(), held));
    }
}

/// Runs the story on an SQLite file in a temporary folder, or on `database_url`, then the
/// breaker's chapter when `breaker`. `Ok(true)` when every expectation held.
pub(crate) async fn run(database_url: Option<String>, breaker: bool) -> anyhow::Result<bool> {
    let dir = tempfile::tempdir().context("create a temporary folder")?;
    let names = match &database_url {
        None => Names {
            resource: RESOURCE.to_owned(),
            key: KEY.to_owned(),
        },
        Some(_) => {
            let run = uuid::Uuid::now_v7().simple().to_string();
            let run = &run[run.len() - 6..];
            Names {
                resource: format!("{RESOURCE}#{run}"),
                key: format!("{KEY}-{run}"),
            }
        }
    };
    let url = database_url
        .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("outbox.db").display()));
    let mut n = Narrator::new();
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let api = statement_api(received.clone()).await?;
    let ledger = Ledger::start().await?;
    let store = Store::connect(
        &url,
        StoreOptions {
            lease_ttl: TtlBounds::new(Duration::from_secs(1), Duration::from_secs(60))?,
            application_name: "outbox-demo".to_owned(),
            ..StoreOptions::default()
        },
    )
    .await
    .context("connect to the demo database")?;
    store.migrate().await?;
    let outbox = Outbox::from_store(store.clone());
    let shutdown = CancellationToken::new();
    let dispatcher = tokio::spawn(outbox_dispatcher::run(
        dispatcher_config(&url, &api, breaker.then_some(ledger.url.as_str()))?,
        shutdown.clone(),
    ));
    n.say(
        "setup",
        &format!(
            "outbox on {}, statement API on {api} (it cannot check tokens), dispatcher running",
            match store.backend() {
                outbox_store::Backend::Sqlite => "SQLite",
                outbox_store::Backend::Postgres => "PostgreSQL",
                outbox_store::Backend::Mssql => "SQL Server",
            }
        ),
    );

    let mut result = story(&mut n, &outbox, &names, &received).await;
    if breaker && result.is_ok() {
        result = breaker_chapter(&mut n, &outbox, &store, &names, &ledger).await;
    }
    shutdown.cancel();
    let stopped = dispatcher.await;
    store.close().await;
    result?;
    n.check(
        "the dispatcher stopped cleanly",
        matches!(stopped, Ok(Ok(()))),
    );
    let failed = n.checks.iter().filter(|(_, held)| !held).count();
    println!();
    if failed == 0 {
        println!(
            "{} {} expectations held in {:.1}s: the stale worker's call never reached the API.",
            n.paint("32;1", "PASS"),
            n.checks.len(),
            n.started.elapsed().as_secs_f64()
        );
    } else {
        println!(
            "{} {failed} of {} expectations failed.",
            n.paint("31;1", "FAIL"),
            n.checks.len()
        );
    }
    Ok(failed == 0)
}

/// The seed's story, step by step.
async fn story(
    n: &mut Narrator,
    outbox: &Outbox,
    names: &Names,
    received: &Arc<Mutex<Vec<Received>>>,
) -> anyhow::Result<()> {
    let (resource, key) = (names.resource.as_str(), names.key.as_str());
    let a = outbox
        .try_acquire(resource, LEASE_TTL)
        .await?
        .context("the resource is free at the start")?;
    n.say(
        "A",
        &format!(
            "acquires {resource} with token {} (lease {}s) and starts the statement",
            a.token,
            LEASE_TTL.as_secs()
        ),
    );
    n.say(
        "A",
        "is paused (think: a long GC pause): it stops renewing and does nothing",
    );
    let paused = Instant::now();
    wait(
        n,
        "waiting for A's lease to expire by database time",
        || async {
            !outbox
                .list_leases()
                .await
                .map(|l| l.iter().any(|l| l.resource.as_str() == resource && l.held))
                .unwrap_or(true)
        },
    )
    .await?;
    n.say(
        "database",
        &format!(
            "A's lease expired ({:.1}s after the pause); A does not know",
            paused.elapsed().as_secs_f64()
        ),
    );

    let b = outbox
        .try_acquire(resource, LEASE_TTL)
        .await?
        .context("the expired lease can be taken")?;
    n.say("B", &format!("acquires {resource} with token {}", b.token));
    n.check(
        &format!("B's token {} is newer than A's {}", b.token, a.token),
        b.token > a.token,
    );
    let b_statement = statement(key, "worker-b");
    let enqueued = outbox.enqueue(&b, &b_statement).await?;
    n.say(
        "B",
        &format!(
            "records its call in the outbox: POST /v1/statements, key {key} (op {})",
            enqueued.op_id
        ),
    );
    wait(
        n,
        "waiting for the dispatcher to deliver B's statement",
        || async {
            received
                .lock()
                .expect("lock")
                .iter()
                .any(|r| r.idempotency_key == key)
        },
    )
    .await?;
    let first = received
        .lock()
        .expect("lock")
        .iter()
        .find(|r| r.idempotency_key == key)
        .cloned()
        .context("B's request")?;
    n.say(
        "API",
        &format!(
            "received B's statement: Idempotency-Key {}, X-Fencing-Token {}",
            first.idempotency_key, first.fencing_token
        ),
    );
    outbox.release(&b).await?;
    n.say("B", "done; releases the lease");

    n.say(
        "A",
        &format!(
            "resumes, finishes its statement and tries to record its call with token {}",
            a.token
        ),
    );
    match outbox.enqueue(&a, &statement(key, "worker-a")).await {
        Err(ProducerError::Stale { current_token }) => {
            n.say(
                "A",
                &format!("refused as stale: token {current_token} is newer; nothing was recorded"),
            );
            n.check("A's enqueue was refused as stale", true);
        }
        other => {
            n.say("A", &format!("unexpected: {other:?}"));
            n.check("A's enqueue was refused as stale", false);
        }
    }
    // Give a wrongly accepted call time to show up before counting.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Only this statement's requests: a database given by URL may hold earlier runs' ops.
    let all: Vec<Received> = received
        .lock()
        .expect("lock")
        .iter()
        .filter(|r| r.idempotency_key == key)
        .cloned()
        .collect();
    n.say(
        "summary",
        &format!(
            "the statement API received {} request(s) for this statement",
            all.len()
        ),
    );
    n.check(
        "the API received exactly one request for it",
        all.len() == 1,
    );
    n.check(
        &format!("it carries B's token (X-Fencing-Token {})", b.token),
        all.iter().all(|r| r.fencing_token == b.token.to_string()),
    );
    n.check(
        "it is B's statement, never A's",
        all.iter().all(|r| r.body.contains("worker-b")),
    );
    Ok(())
}

/// The statement both workers produce under `key`; `by` tells whose it is.
fn statement(key: &str, by: &str) -> Operation {
    Operation::post("statements", "/v1/statements")
        .json(&serde_json::json!({"account": 1842, "month": "2026-07", "generated_by": by}))
        .idempotency_key(key)
        .build()
        .expect("a valid op")
}

/// Polls `done` until it holds, showing `what` with the time waited; fails after
/// [`STEP_TIMEOUT`].
async fn wait<F, Fut>(n: &Narrator, what: &str, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !done().await {
        anyhow::ensure!(
            started.elapsed() < STEP_TIMEOUT,
            "gave up {what} after {}s",
            STEP_TIMEOUT.as_secs()
        );
        n.progress(&format!("{what}… {:.1}s", started.elapsed().as_secs_f64()));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    n.clear();
    Ok(())
}

/// Starts the stand-in statement API on a free loopback port; returns its base URL.
async fn statement_api(received: Arc<Mutex<Vec<Received>>>) -> anyhow::Result<String> {
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: String| {
        let received = received.clone();
        async move {
            let header = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            };
            received.lock().expect("lock").push(Received {
                idempotency_key: header("idempotency-key"),
                fencing_token: header("x-fencing-token"),
                body,
            });
            StatusCode::CREATED
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}"))
}

/// The dispatcher's configuration for the demo: quick polling, a short partition lease, no
/// HTTP listener, the statement API, and with `--breaker` the ledger API (its breaker opens
/// after 3 failures, for 1 s doubling up to 2 s).
fn dispatcher_config(url: &str, api: &str, ledger: Option<&str>) -> anyhow::Result<Config> {
    let mut text = format!(
        "[database]\nurl = {url:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"3s\"\npoll_interval = \"100ms\"\nlisten = \"\"\n[destinations.statements]\nbase_url = {api:?}\ntimeout = \"2s\"\n"
    );
    if let Some(ledger) = ledger {
        text.push_str(&format!(
            "[destinations.ledger]\nbase_url = {ledger:?}\ntimeout = \"2s\"\nmax_in_flight = 1\nretry = {{ base = \"100ms\", cap = \"200ms\", max_attempts = 5 }}\nbreaker = {{ failures = {LEDGER_FAILURES}, cooldown = \"1s\", cooldown_max = \"2s\" }}\n"
        ));
    }
    Ok(Config::load(Some(&text), &HashMap::new())?)
}

/// Consecutive failures that open the ledger's breaker in the demo.
const LEDGER_FAILURES: usize = 3;
/// Ledger postings the breaker's chapter enqueues.
const POSTINGS: usize = 5;

/// The stand-in ledger API: answers 503 while `down`, else 201; counts what it answered.
struct Ledger {
    url: String,
    down: Arc<std::sync::atomic::AtomicBool>,
    failed: Arc<std::sync::atomic::AtomicUsize>,
    posted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Ledger {
    async fn start() -> anyhow::Result<Ledger> {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let down = Arc::new(AtomicBool::new(true));
        let failed = Arc::new(AtomicUsize::new(0));
        let posted = Arc::new(AtomicUsize::new(0));
        let (d, f, p) = (down.clone(), failed.clone(), posted.clone());
        let app = axum::Router::new().fallback(move || {
            let (d, f, p) = (d.clone(), f.clone(), p.clone());
            async move {
                if d.load(Ordering::SeqCst) {
                    f.fetch_add(1, Ordering::SeqCst);
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    p.fetch_add(1, Ordering::SeqCst);
                    StatusCode::CREATED
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Ledger {
            url: format!("http://{addr}"),
            down,
            failed,
            posted,
        })
    }

    fn failed(&self) -> usize {
        self.failed.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn posted(&self) -> usize {
        self.posted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The ledger destination's breaker state, as every dispatcher reads it.
async fn ledger_state(store: &Store) -> &'static str {
    match store.destination_list().await {
        Ok(rows) => rows
            .iter()
            .find(|h| h.destination == "ledger")
            .map_or("closed", |h| h.shown_state()),
        Err(_) => "unknown",
    }
}

/// The breaker's chapter: the ledger API is down, its breaker opens after three failures and
/// the postings wait; each probe fails until the API is back, then one probe closes it and
/// every posting is delivered, none dead.
async fn breaker_chapter(
    n: &mut Narrator,
    outbox: &Outbox,
    store: &Store,
    names: &Names,
    ledger: &Ledger,
) -> anyhow::Result<()> {
    println!();
    let resource = format!("{}:ledger", names.resource);
    let lease = outbox
        .try_acquire(&resource, Duration::from_secs(30))
        .await?
        .context("the ledger resource is free")?;
    for i in 0..POSTINGS {
        let op = Operation::post("ledger", "/v1/postings")
            .json(&serde_json::json!({"account": 1842, "posting": i}))
            .idempotency_key(format!("{}-posting-{i}", names.key))
            .unordered()
            .build()?;
        outbox.enqueue(&lease, &op).await?;
    }
    n.say(
        "ledger",
        &format!("{POSTINGS} postings enqueued; the ledger API answers 503 to everything"),
    );
    wait(n, "waiting for the ledger's breaker to open", || async {
        ledger_state(store).await == "open"
    })
    .await?;
    let opened_after = ledger.failed();
    n.say(
        "breaker",
        &format!(
            "open after {opened_after} consecutive failures: the postings wait, pending, unclaimed"
        ),
    );
    n.check(
        "the breaker opened after exactly 3 failed attempts (one in flight at a time)",
        opened_after == LEDGER_FAILURES,
    );
    wait(n, "waiting for the first probe (1 s cooldown)", || async {
        ledger.failed() > opened_after && ledger_state(store).await == "open"
    })
    .await?;
    n.say(
        "breaker",
        "half-open: one probe sent, it failed: open again for twice the cooldown (2 s)",
    );
    ledger
        .down
        .store(false, std::sync::atomic::Ordering::SeqCst);
    n.say("API", "the ledger API is back");
    wait(
        n,
        "waiting for the next probe to close the breaker",
        || async { ledger.posted() == POSTINGS },
    )
    .await?;
    let failed = ledger.failed();
    n.say(
        "breaker",
        &format!("closed by a healthy probe; all {POSTINGS} postings delivered"),
    );
    n.check(
        "while the API was down it got only the failures that opened the breaker and one probe per cooldown",
        failed <= LEDGER_FAILURES + 3,
    );
    let states = store.admin_status().await?;
    let dead = states
        .counts
        .iter()
        .filter(|c| c.destination == "ledger" && c.state == "dead")
        .map(|c| c.ops)
        .sum::<i64>();
    n.check("no posting is dead", dead == 0);
    n.check(
        "the breaker is closed",
        ledger_state(store).await == "closed",
    );
    Ok(())
}
