//! Throwaway PostgreSQL clusters started from the local binaries (`initdb`, `pg_ctl`), or the
//! server named by `DATABASE_URL`. A watcher process stops each cluster and removes its files
//! when the test process exits, even when tests fail or the process is killed. A cluster can be
//! stopped cleanly, or crashed (SIGKILL to the postmaster and every process it started), and
//! started again.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// What to tell someone whose machine has no PostgreSQL.
pub const HOW_TO_GET_POSTGRES: &str = "PostgreSQL tests need a server: install the binaries \
(Debian/Ubuntu: `apt-get install postgresql`; initdb and pg_ctl are looked up on PATH and under \
/usr/lib/postgresql/*/bin) or set DATABASE_URL=postgres://user@host:port/db to a server where \
that user may create databases";

/// Where the PostgreSQL server programs are.
pub(crate) fn bin_dir() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return Some(dir);
            }
        }
    }
    versioned_bin_dir()
}

/// The newest `/usr/lib/postgresql/<version>/bin`, where Debian keeps every server program
/// (`pg_controldata`, `pg_rewind`… which Patroni needs and a PATH may lack).
pub(crate) fn versioned_bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Whether this process runs as root, which PostgreSQL refuses: then the server programs run
/// as the `postgres` user through `runuser`.
pub(crate) fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// What a cluster's commits survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// Nothing: no fsync, and a commit returns before its WAL is written out of the server's
    /// memory (`synchronous_commit=off`), so a crash of the server loses the latest commits.
    Nothing,
    /// A crash of the server's processes (SIGKILL): a commit returns once its WAL is written to
    /// the kernel, which keeps it; never fsynced, so a crash of the machine would lose it.
    ProcessCrash,
    /// A power cut: PostgreSQL's defaults (fsync, synchronous commit, full-page writes).
    PowerCut,
}

/// What a fault test's cluster runs short of, on purpose.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// The data folder on a filesystem of its own of this many MiB (a tmpfs, mounted by this
    /// process, which must be root), so that it fills up; its WAL kept to 32-48 MB, so that the
    /// tables fill it rather than the WAL.
    pub disk_mib: Option<u32>,
    /// The WAL (`pg_wal`) on a filesystem of its own of this many MiB (a tmpfs, as above),
    /// the tables' files on the ordinary one: the WAL's disk fills up, not the tables'.
    pub wal_disk_mib: Option<u32>,
    /// `max_connections` (400 otherwise), with none reserved for superusers: the test's logins
    /// are superusers, and would otherwise still get in when every other slot is taken; and
    /// every connection logged (`log_connections`).
    pub max_connections: Option<u32>,
}

/// A PostgreSQL cluster in a temporary folder, on a free loopback port, with trust auth.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres_user: bool,
    durability: Durability,
    limits: Limits,
}

impl Cluster {
    /// Creates and starts a new cluster for tests (no fsync, no synchronous commit: nothing
    /// here must survive a crash), and a watcher that removes it when this process ends.
    pub fn start() -> Result<Cluster, String> {
        Cluster::start_with(Durability::Nothing)
    }

    /// As [`Cluster::start`], for tests that crash it ([`Cluster::crash`]): every commit
    /// survives a crash of the server's processes (synchronous commit, full-page writes; still
    /// no fsync).
    pub fn start_crashable() -> Result<Cluster, String> {
        Cluster::start_with(Durability::ProcessCrash)
    }

    /// As [`Cluster::start`], with PostgreSQL's default durability (fsync, synchronous commit,
    /// full-page writes), for benchmarks.
    pub fn start_durable() -> Result<Cluster, String> {
        Cluster::start_with(Durability::PowerCut)
    }

    /// As [`Cluster::start_crashable`] (every acknowledged commit survives the server's
    /// processes dying, as one may when its disk is full), short of what `limits` says.
    pub fn start_limited(limits: Limits) -> Result<Cluster, String> {
        Cluster::start_limited_with(Durability::ProcessCrash, limits)
    }

    fn start_with(durability: Durability) -> Result<Cluster, String> {
        Cluster::start_limited_with(durability, Limits::default())
    }

    fn start_limited_with(durability: Durability, limits: Limits) -> Result<Cluster, String> {
        let bin = bin_dir().ok_or_else(|| HOW_TO_GET_POSTGRES.to_owned())?;
        let as_postgres_user = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix("outbox-pg-")
            .tempdir()
            .map_err(|e| format!("cannot create a folder for PostgreSQL: {e}"))?
            .keep();
        let cluster = Cluster {
            bin,
            dir,
            port: 0,
            as_postgres_user,
            durability,
            limits,
        };
        if let Some(mib) = limits.disk_mib {
            cluster.mount_small_disk(&format!("{}/disk", cluster.dir_str()), mib, "its data")?;
        }
        if let Some(mib) = limits.wal_disk_mib {
            cluster.mount_small_disk(&cluster.wal_disk(), mib, "its WAL")?;
        }
        if as_postgres_user {
            cluster.run(
                "chown",
                &["-R", "postgres:postgres", cluster.dir_str()],
                false,
            )?;
        }
        cluster.watch_this_process()?;
        let data = cluster.data_dir();
        let mut initdb = vec![
            "-D",
            &data,
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ];
        let wal = format!("{}/pg_wal", cluster.wal_disk());
        if limits.wal_disk_mib.is_some() {
            initdb.extend(["-X", &wal]);
        }
        cluster.run("initdb", &initdb, true)?;
        let mut cluster = cluster;
        let mut last_error = String::new();
        // A port found free can be taken before the server binds it: try a few.
        for _ in 0..3 {
            cluster.port = free_port()?;
            match cluster.pg_ctl_start() {
                Ok(()) => return Ok(cluster),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// The URL of database `db` on this cluster.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The URL of database `db` over the server's Unix socket (its log says `host=[local]`
    /// for these, the address for TCP ones).
    pub fn socket_url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@localhost:{}/{db}?host={}",
            self.port,
            self.dir_str()
        )
    }

    /// Grows the WAL's filesystem ([`Limits::wal_disk_mib`]) to `mib` MiB, as an operator
    /// grows a full volume; the server need not run.
    pub fn grow_wal_disk(&self, mib: u32) -> Result<(), String> {
        if self.limits.wal_disk_mib.is_none() {
            return Err("this cluster's WAL is not on a filesystem of its own".to_owned());
        }
        let size = format!("remount,size={mib}m");
        self.run("mount", &["-o", &size, &self.wal_disk()], false)
    }

    /// Whether the server's postmaster runs (its pid file names a live process).
    pub fn is_running(&self) -> bool {
        self.postmaster_pid()
            .is_ok_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
    }

    /// The postmaster's pid, from the first line of `postmaster.pid`.
    fn postmaster_pid(&self) -> Result<u32, String> {
        let pid_file = format!("{}/postmaster.pid", self.data_dir());
        let text = std::fs::read_to_string(&pid_file)
            .map_err(|e| format!("cannot read {pid_file} (is the server running?): {e}"))?;
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| format!("{pid_file} names no process: {text:?}"))
    }

    /// Mounts a tmpfs of `mib` MiB on the new folder `dir`, for `what` to fill (needs root).
    fn mount_small_disk(&self, dir: &str, mib: u32, what: &str) -> Result<(), String> {
        if !running_as_root() {
            return Err(format!(
                "a cluster with {what} on a {mib} MiB filesystem of its own needs root (to mount \
                 a tmpfs); run the tests as root, as CI does"
            ));
        }
        std::fs::create_dir(dir).map_err(|e| format!("cannot create {dir}: {e}"))?;
        let size = format!("size={mib}m,mode=0700");
        self.run("mount", &["-t", "tmpfs", "-o", &size, "tmpfs", dir], false)
    }

    /// Stops the server cleanly, keeping its files.
    pub fn stop(&self) -> Result<(), String> {
        let data = self.data_dir();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"], true)
    }

    /// Starts the server again on the same port (after a crash, once its crash recovery is
    /// done).
    pub fn restart(&self) -> Result<(), String> {
        self.pg_ctl_start()
    }

    /// Crashes the server: SIGKILL to the postmaster (its pid read from `postmaster.pid`) and
    /// to every process it started, as when the machine's OOM killer or an operator's `kill -9`
    /// takes them: no shutdown checkpoint, the files left as they were. The next start
    /// ([`Cluster::restart`]) runs crash recovery. Refused on a cluster whose commits would not
    /// survive it (see [`Cluster::start_crashable`]).
    pub fn crash(&self) -> Result<(), String> {
        if self.durability == Durability::Nothing {
            return Err("this cluster would lose commits in a crash: start it with \
                        Cluster::start_crashable"
                .to_owned());
        }
        let postmaster = self.postmaster_pid()?;
        // All stopped first: the postmaster starts no process while they are listed, and none
        // of them sees another die (a backend would exit on its own on the postmaster's death).
        // A child may have exited since it was listed: signals to children may fail, and the
        // wait below finds any that really did not die.
        kill("-STOP", &[postmaster])?;
        let mut pids = vec![postmaster];
        let mut next = 0;
        while let Some(&pid) = pids.get(next) {
            let children = children_of(pid);
            if !children.is_empty() {
                let _ = kill("-STOP", &children);
            }
            pids.extend(children);
            next += 1;
        }
        if pids.len() > 1 {
            let _ = kill("-KILL", &pids[1..]);
        }
        kill("-KILL", &[postmaster])?;
        // The next start refuses while the old postmaster exists, even as a zombie.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while pids
            .iter()
            .any(|pid| Path::new(&format!("/proc/{pid}")).exists())
        {
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "the server's processes {pids:?} were SIGKILLed but still exist after 30 s"
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(())
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
        let data = self.data_dir();
        let log = format!("{}/server.log", self.dir_str());
        let speed = match self.durability {
            Durability::PowerCut => "-c shared_buffers=128MB",
            Durability::ProcessCrash => "-c fsync=off -c shared_buffers=64MB",
            Durability::Nothing => {
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=64MB"
            }
        };
        let connections = match self.limits.max_connections {
            Some(n) => format!(
                "-c max_connections={n} -c superuser_reserved_connections=0 -c log_connections=on"
            ),
            None => "-c max_connections=400".to_owned(),
        };
        let small_disk = self.limits.disk_mib.is_some() || self.limits.wal_disk_mib.is_some();
        let wal = match small_disk {
            true => " -c max_wal_size=48MB -c min_wal_size=32MB",
            false => "",
        };
        let options = format!(
            "-c port={} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} \
             {connections} {speed}{wal}",
            self.port,
            self.dir_str()
        );
        self.run(
            "pg_ctl",
            &[
                "-D", &data, "-l", &log, "-o", &options, "-w", "-t", "60", "start",
            ],
            true,
        )
        .map_err(|e| {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            format!("{e}\nserver log:\n{tail}")
        })
    }

    /// Where the WAL's own filesystem is mounted ([`Limits::wal_disk_mib`]).
    fn wal_disk(&self) -> String {
        format!("{}/wal", self.dir_str())
    }

    fn data_dir(&self) -> String {
        match self.limits.disk_mib {
            Some(_) => format!("{}/disk/data", self.dir_str()),
            None => format!("{}/data", self.dir_str()),
        }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(format!("{}/server.log", self.dir_str())).unwrap_or_default()
    }

    fn dir_str(&self) -> &str {
        self.dir.to_str().expect("temp dir paths are UTF-8")
    }

    /// Runs a program; PostgreSQL's own programs as the `postgres` user when we are root.
    fn run(&self, program: &str, args: &[&str], server_program: bool) -> Result<(), String> {
        let exe = if server_program {
            self.bin.join(program)
        } else {
            PathBuf::from(program)
        };
        let mut cmd = if server_program && self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {:?} failed ({}): {}{}",
                exe.display(),
                args,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Spawns a detached shell that waits for this process to end, then stops the server
    /// and deletes the folder. It runs in its own process group so Ctrl-C does not take it.
    fn watch_this_process(&self) -> Result<(), String> {
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = if self.as_postgres_user {
            format!(
                "runuser -u postgres -- {} -D {} -m immediate stop",
                pg_ctl.display(),
                self.data_dir()
            )
        } else {
            format!(
                "{} -D {} -m immediate stop",
                pg_ctl.display(),
                self.data_dir()
            )
        };
        let mut unmount = String::new();
        if self.limits.disk_mib.is_some() {
            unmount += &format!("umount -l {}/disk >/dev/null 2>&1; ", self.dir_str());
        }
        if self.limits.wal_disk_mib.is_some() {
            unmount += &format!("umount -l {} >/dev/null 2>&1; ", self.wal_disk());
        }
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {stop} >/dev/null 2>&1; {unmount}rm -rf {dir}",
            pid = std::process::id(),
            dir = self.dir_str()
        );
        spawn_watcher(&script, "cluster")
    }
}

/// Sends `signal` (as kill(1) spells it: "-STOP", "-KILL") to every process of `pids`; an
/// error when it could not be delivered to one of them.
fn kill(signal: &str, pids: &[u32]) -> Result<(), String> {
    let out = Command::new("kill")
        .arg(signal)
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run kill: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "kill {signal} {pids:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The processes whose parent is `parent`, from `/proc`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // "pid (comm) state ppid ...": the command may hold spaces and parentheses.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1;
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// Runs `script` in a detached shell of its own process group (so Ctrl-C does not take it),
/// to clean up after the test process: the `what` watcher.
pub(crate) fn spawn_watcher(script: &str, what: &str) -> Result<(), String> {
    Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start the {what} watcher: {e}"))
}

/// A loopback port free at the time of asking.
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// The server every PostgreSQL test of this process shares.
#[derive(Debug)]
pub enum Server {
    /// `DATABASE_URL` was set: tests create their databases there.
    External(String),
    /// A throwaway cluster started for this process.
    Throwaway(Cluster),
}

impl Server {
    /// URL of the maintenance database, where test databases are created.
    pub fn admin_url(&self) -> String {
        match self {
            Server::External(url) => url.clone(),
            Server::Throwaway(c) => c.url("postgres"),
        }
    }

    /// URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        match self {
            Server::External(url) => with_database(url, db),
            Server::Throwaway(c) => c.url(db),
        }
    }
}

/// Replaces the database name of a `postgres://` URL, keeping any query string.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let after_scheme = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[after_scheme..].find('/') {
        Some(i) => &base[..after_scheme + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// The shared server, started on first use. Panics with installation advice when there is
/// neither `DATABASE_URL` nor a local PostgreSQL: these tests never pass silently.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    let server = SERVER.get_or_init(|| match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Ok(Server::External(url)),
        _ => Cluster::start().map(Server::Throwaway),
    });
    match server {
        Ok(s) => s,
        Err(e) => panic!("cannot start PostgreSQL for the tests: {e}"),
    }
}

/// Whether a throwaway cluster could be started here (the binaries exist).
pub fn binaries_available() -> bool {
    bin_dir().is_some()
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_urls_get_their_database_replaced() {
        assert_eq!(
            with_database("postgres://u@h:5/test", "x"),
            "postgres://u@h:5/x"
        );
        assert_eq!(with_database("postgres://u@h:5", "x"), "postgres://u@h:5/x");
        assert_eq!(
            with_database("postgres://u@h/test?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
    }
}
