//! The real processes of a chaos run: the example worker (six of them) and the dispatcher
//! daemon, built by cargo, started, paused, resumed and killed with real signals.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use outbox_tests::netns::Netns;
use outbox_tests::signal;

/// Paths of the two programs a chaos run starts.
#[derive(Debug)]
pub(crate) struct Binaries {
    /// `outbox-dispatcher`.
    pub(crate) dispatcher: PathBuf,
    /// The `statement_worker` example of `outbox-producer`.
    pub(crate) worker: PathBuf,
}

/// Builds the dispatcher and the example worker with the profile of this test (a no-op after
/// `cargo test --workspace`, which built both) and returns their paths as cargo reports them.
pub(crate) fn binaries() -> &'static Binaries {
    static BINARIES: OnceLock<Binaries> = OnceLock::new();
    BINARIES.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut cargo = Command::new(env!("CARGO"));
        cargo.current_dir(&workspace).args([
            "build",
            "--locked",
            "--workspace",
            "--bin",
            "outbox-dispatcher",
            "--example",
            "statement_worker",
            "--message-format=json-render-diagnostics",
        ]);
        if !cfg!(debug_assertions) {
            cargo.arg("--release");
        }
        let out = cargo.stderr(Stdio::inherit()).output().expect("run cargo");
        assert!(out.status.success(), "cargo build failed");
        let executable = |name: &str| -> PathBuf {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
                .find_map(|m| m["executable"].as_str().map(PathBuf::from))
                .unwrap_or_else(|| panic!("cargo built no executable named {name}"))
        };
        Binaries {
            dispatcher: executable("outbox-dispatcher"),
            worker: executable("statement_worker"),
        }
    })
}

/// A child process the driver may stop and resume; killed if still running when dropped.
#[derive(Debug)]
pub(crate) struct Proc {
    child: Child,
    /// When a pause should end, while it is stopped.
    pub(crate) paused_until: Option<Instant>,
}

impl Proc {
    fn new(child: Child) -> Proc {
        Proc {
            child,
            paused_until: None,
        }
    }

    /// SIGSTOP until `until`.
    pub(crate) fn pause(&mut self, until: Instant) {
        signal(&self.child, "-STOP");
        self.paused_until = Some(until);
    }

    /// SIGCONT.
    pub(crate) fn resume(&mut self) {
        signal(&self.child, "-CONT");
        self.paused_until = None;
    }

    /// SIGCONT if its pause is over at `now`.
    pub(crate) fn resume_if_due(&mut self, now: Instant) {
        if self.paused_until.is_some_and(|until| until <= now) {
            self.resume();
        }
    }

    /// Whether it is stopped.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused_until.is_some()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How one worker process is started.
#[derive(Debug, Clone)]
pub(crate) struct WorkerSpec {
    /// Its name, part of its idempotency keys.
    pub(crate) name: String,
    /// Seeds its choices.
    pub(crate) seed: u64,
    /// Ignores the lost-lease signal (so only the fenced enqueue stops it).
    pub(crate) uncooperative: bool,
    /// How long it keeps running jobs.
    pub(crate) run_for: Duration,
}

/// A running worker; its stdout (one JSON event a line) is collected as it comes.
#[derive(Debug)]
pub(crate) struct Worker {
    /// Its name.
    pub(crate) name: String,
    /// The process.
    pub(crate) proc: Proc,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Starts the example worker in loop mode on `database_url`; stderr goes to `log`.
    pub(crate) fn start(database_url: &str, spec: &WorkerSpec, log: &Path) -> Worker {
        let mut command = Command::new(&binaries().worker);
        command
            .arg("--database-url")
            .arg(database_url)
            .args(["--loop-for", &format!("{}ms", spec.run_for.as_millis())])
            .args(["--accounts", "4", "--max-ops", "3"])
            .args(["--ttl", "1s", "--ttl-max", "2s", "--work", "300ms"])
            .args(["--name", &spec.name, "--seed", &spec.seed.to_string()])
            .args(spec.uncooperative.then_some("--uncooperative"));
        Worker::spawn(command, spec, log)
    }

    /// Starts the Python example (`examples/python/statement_worker.py loop`, over the SQL API
    /// with psycopg) on the same accounts, leases and event lines as [`Worker::start`]; it
    /// has no lease keeper, so it is uncooperative by nature. The interpreter is
    /// `OUTBOX_EXAMPLES_PYTHON`, or the virtualenv the test command makes.
    pub(crate) fn start_python(database_url: &str, spec: &WorkerSpec, log: &Path) -> Worker {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let python = std::env::var_os("OUTBOX_EXAMPLES_PYTHON")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/examples-venv/bin/python"));
        assert!(
            python.is_file(),
            "{} not found: run the test command (ops/test.sh), which makes that virtualenv \
             from examples/python/requirements.txt, or set OUTBOX_EXAMPLES_PYTHON",
            python.display()
        );
        let mut command = Command::new(python);
        command
            .arg(root.join("examples/python/statement_worker.py"))
            .arg("loop")
            .arg("--database-url")
            .arg(database_url)
            .args(["--loop-for", &format!("{}", spec.run_for.as_secs_f64())])
            .args(["--accounts", "4", "--max-ops", "3"])
            .args(["--ttl-min", "1s", "--ttl-max", "2s", "--work", "300ms"])
            .args(["--name", &spec.name, "--seed", &spec.seed.to_string()]);
        Worker::spawn(command, spec, log)
    }

    fn spawn(mut command: Command, spec: &WorkerSpec, log: &Path) -> Worker {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("worker log"))
            .spawn()
            .unwrap_or_else(|e| panic!("start worker {}: {e}", spec.name));
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let stdout = child.stdout.take().expect("piped stdout");
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Worker {
            name: spec.name.clone(),
            proc: Proc::new(child),
            lines,
            reader: Some(reader),
        }
    }

    /// Every line it printed so far, while it runs.
    pub(crate) fn lines_so_far(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// SIGKILL (a producer stopped for a runbook step, say), and every line it printed.
    pub(crate) fn kill(mut self) -> Vec<String> {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
        if let Some(reader) = self.reader.take() {
            reader.join().expect("worker output reader");
        }
        std::mem::take(&mut *self.lines.lock().unwrap())
    }

    /// Waits for it to finish its loop (up to `timeout`) and returns every line it printed.
    pub(crate) fn finish(mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.proc.child.try_wait().expect("wait for worker") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "worker {} did not finish within {timeout:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            status.success(),
            "worker {} exited with {status}",
            self.name
        );
        if let Some(reader) = self.reader.take() {
            reader.join().expect("worker output reader");
        }
        std::mem::take(&mut *self.lines.lock().unwrap())
    }
}

/// One dispatcher instance; each (re)start is a new process with its own log file. Several
/// instances share one config: with one partition, one leads it and the others stand by; with
/// more, each leads its fair share.
#[derive(Debug)]
pub(crate) struct Dispatcher {
    /// Its name, in its log files' names.
    pub(crate) name: String,
    /// The running process (or, while down after a graceful leave, the one that exited).
    pub(crate) proc: Proc,
    config: PathBuf,
    logs: PathBuf,
    starts: u32,
    down: bool,
    /// The network namespace it runs in, if not this host's.
    netns: Option<String>,
}

impl Dispatcher {
    /// Writes the shared config into `dir` (one destination `statements` at `destination`:
    /// 1 s timeout, quick retries that never give up within a run; `partitions` partitions on a
    /// 3 s partition lease).
    pub(crate) fn configure(
        dir: &Path,
        database_url: &str,
        destination: &str,
        partitions: u32,
    ) -> PathBuf {
        Self::configure_with_lease(
            dir,
            database_url,
            destination,
            partitions,
            Duration::from_secs(3),
        )
    }

    /// As [`Dispatcher::configure`], with a partition lease of `lease_ttl`.
    pub(crate) fn configure_with_lease(
        dir: &Path,
        database_url: &str,
        destination: &str,
        partitions: u32,
        lease_ttl: Duration,
    ) -> PathBuf {
        let config = dir.join("dispatcher.toml");
        // No circuit breaker: a rare run of 503s would only pause delivery for a cooldown; the
        // breaker has its own tests (dispatcher/tests/breaker.rs).
        let text = format!(
            "[database]\nurl = {database_url:?}\n[lease]\nmin_ttl = \"1s\"\n\
             [dispatcher]\nlease_ttl = \"{lease}ms\"\npoll_interval = \"100ms\"\nlisten = \"\"\nshutdown_grace = \"5s\"\n\
             partitions = {partitions}\n\
             [destinations.statements]\nbase_url = {destination:?}\ntimeout = \"1s\"\n\
             retry = {{ base = \"50ms\", cap = \"500ms\", max_attempts = 1000, max_age = \"1h\" }}\n\
             breaker = {{ enabled = false }}\n",
            lease = lease_ttl.as_millis()
        );
        std::fs::write(&config, text).expect("write dispatcher config");
        config
    }

    /// Starts instance `name` on `config`; its logs go next to the config.
    pub(crate) fn start(config: &Path, name: &str) -> Dispatcher {
        Self::start_within(config, name, None)
    }

    /// As [`Dispatcher::start`], inside network namespace `netns` (`ip netns exec`), every
    /// start again too.
    pub(crate) fn start_in(config: &Path, name: &str, netns: &Netns) -> Dispatcher {
        Self::start_within(config, name, Some(netns.name().to_owned()))
    }

    fn start_within(config: &Path, name: &str, netns: Option<String>) -> Dispatcher {
        let logs = config.parent().expect("config dir").to_owned();
        let log = logs.join(format!("{name}-1.log"));
        let proc = Proc::new(Self::spawn(config, &log, netns.as_deref()));
        Dispatcher {
            name: name.to_owned(),
            proc,
            config: config.to_owned(),
            logs,
            starts: 1,
            down: false,
            netns,
        }
    }

    fn spawn(config: &Path, log: &Path, netns: Option<&str>) -> Child {
        let mut command = match netns {
            // `ip netns exec` execs the program: the child's pid is the dispatcher's.
            Some(netns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", netns]).arg(&binaries().dispatcher);
                c
            }
            None => Command::new(&binaries().dispatcher),
        };
        command
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("dispatcher log"))
            .spawn()
            .expect("start outbox-dispatcher")
    }

    /// SIGKILL (stopped or not), then a new process at once; if it was the leader, whoever
    /// leads next waits out the dead one's lease.
    pub(crate) fn kill_and_restart(&mut self) {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
        self.start_again();
    }

    /// SIGTERM (after SIGCONT if it is stopped): a graceful leave. It is down from now on,
    /// until [`Dispatcher::start_again`]; [`Dispatcher::exited`] says when it is gone.
    pub(crate) fn terminate(&mut self) {
        if self.proc.is_paused() {
            self.proc.resume();
        }
        signal(&self.proc.child, "-TERM");
        self.down = true;
    }

    /// How it exited, once it has; `None` while it still runs.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.proc.child.try_wait().expect("wait for dispatcher")
    }

    /// SIGKILL, for one that overran its leave.
    pub(crate) fn kill(&mut self) {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
    }

    /// A new process (with a new log) in place of the one that ended.
    pub(crate) fn start_again(&mut self) {
        self.starts += 1;
        let log = self.logs.join(format!("{}-{}.log", self.name, self.starts));
        self.proc = Proc::new(Self::spawn(&self.config, &log, self.netns.as_deref()));
        self.down = false;
    }

    /// Its process id, as its membership row names it.
    pub(crate) fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Whether it is leaving or left (SIGTERM) and was not started again yet.
    pub(crate) fn is_down(&self) -> bool {
        self.down
    }

    /// Lines of all its processes' logs that contain `text`.
    pub(crate) fn logged(&self, text: &str) -> usize {
        (1..=self.starts)
            .map(|n| self.logs.join(format!("{}-{n}.log", self.name)))
            .filter_map(|path| std::fs::read_to_string(path).ok())
            .map(|log| log.lines().filter(|l| l.contains(text)).count())
            .sum()
    }

    /// SIGTERM and wait for a clean exit.
    pub(crate) fn stop(self) {
        signal(&self.proc.child, "-TERM");
        let mut proc = self.proc;
        let status = proc.child.wait().expect("wait for dispatcher");
        assert!(
            status.success(),
            "dispatcher {} exited with {status}",
            self.name
        );
    }
}
