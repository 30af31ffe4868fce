//! A real PgBouncer (Debian's `pgbouncer`) in front of a test's PostgreSQL server, on a free
//! loopback port, configured as users usually run it: trust auth towards a trusted server,
//! `ignore_startup_parameters = extra_float_digits` and nothing else. It is stopped and its
//! folder removed when the value drops, or by a watcher when the test process dies.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// What to tell someone whose machine has no PgBouncer.
pub const HOW_TO_GET_PGBOUNCER: &str = "the PgBouncer tests need Debian's pgbouncer \
(`apt-get install pgbouncer`; the test command installs it when it runs as root)";

/// How PgBouncer hands server connections to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// A client keeps one server connection for its whole session.
    Session,
    /// A client holds a server connection for one transaction at a time.
    Transaction,
}

impl PoolMode {
    fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// The pool's limits: how many server connections one database and user get, and how long a
/// client's query may wait for one before PgBouncer ends its connection (`query_wait_timeout`,
/// SQLSTATE 08P01).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// `default_pool_size`.
    pub size: u32,
    /// `query_wait_timeout` in seconds (PgBouncer's default: 120).
    pub query_wait_timeout_s: u32,
}

impl Default for Pool {
    /// As the tests usually run it: 20 server connections, PgBouncer's own wait.
    fn default() -> Pool {
        Pool {
            size: 20,
            query_wait_timeout_s: 120,
        }
    }
}

/// A running PgBouncer.
#[derive(Debug)]
pub struct PgBouncer {
    dir: PathBuf,
    port: u16,
    pid: u32,
}

/// Where the pgbouncer program is.
fn program() -> Option<PathBuf> {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

impl PgBouncer {
    /// Starts PgBouncer in `mode` in front of the server `server_url` names (its host, port
    /// and user; every database name passes through).
    pub fn start(server_url: &str, mode: PoolMode) -> Result<PgBouncer, String> {
        PgBouncer::start_with(server_url, mode, Pool::default())
    }

    /// As [`PgBouncer::start`], with the pool's limits `pool`.
    pub fn start_with(server_url: &str, mode: PoolMode, pool: Pool) -> Result<PgBouncer, String> {
        let exe = program().ok_or_else(|| HOW_TO_GET_PGBOUNCER.to_owned())?;
        let server = url::Url::parse(server_url).map_err(|e| format!("{server_url}: {e}"))?;
        let host = server.host_str().unwrap_or("127.0.0.1").to_owned();
        let server_port = server.port().unwrap_or(5432);
        let user = match server.username() {
            "" => "postgres".to_owned(),
            u => u.to_owned(),
        };
        let as_postgres_user = crate::pg::running_as_root();
        let mut last_error = String::new();
        // A port found free can be taken before PgBouncer binds it: try a few, each in a
        // folder of its own (a failed try's watcher removes its folder).
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("outbox-pgbouncer-")
                .tempdir()
                .map_err(|e| format!("cannot create a folder for PgBouncer: {e}"))?
                .keep();
            let port = crate::pg::free_port()?;
            let ini = format!(
                "[databases]\n\
                 * = host={host} port={server_port} user={user}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {dir}/users.txt\n\
                 pool_mode = {mode}\n\
                 ignore_startup_parameters = extra_float_digits\n\
                 default_pool_size = {size}\n\
                 query_wait_timeout = {wait}\n\
                 max_client_conn = 500\n\
                 logfile = {dir}/pgbouncer.log\n\
                 pidfile = {dir}/pgbouncer.pid\n",
                dir = dir.display(),
                mode = mode.as_str(),
                size = pool.size,
                wait = pool.query_wait_timeout_s,
            );
            write(&dir.join("pgbouncer.ini"), &ini)?;
            write(&dir.join("users.txt"), &format!("\"{user}\" \"\"\n"))?;
            if as_postgres_user {
                run(Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(&dir))?;
            }
            let mut cmd = if as_postgres_user {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(&exe);
                c
            } else {
                Command::new(&exe)
            };
            cmd.arg("-d").arg(dir.join("pgbouncer.ini"));
            match run(&mut cmd).and_then(|()| wait_for_pid(&dir)) {
                Ok(pid) => {
                    let bouncer = PgBouncer { dir, port, pid };
                    bouncer.watch_this_process()?;
                    if wait_for_port(port) {
                        return Ok(bouncer);
                    }
                    last_error = format!("PgBouncer did not listen on {port}:\n{}", bouncer.log());
                    drop(bouncer);
                }
                Err(e) => {
                    last_error = format!("{e}\n{}", read_log(&dir));
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
        Err(last_error)
    }

    /// `server_url` (a database on the server behind this PgBouncer) with this PgBouncer's host
    /// and port instead of the server's: what a user changes to go through the pooler.
    pub fn in_front_of(&self, server_url: &str) -> String {
        let mut url = url::Url::parse(server_url).expect("a PostgreSQL URL");
        url.set_host(Some("127.0.0.1")).expect("a host");
        url.set_port(Some(self.port)).expect("a port");
        url.into()
    }

    /// What PgBouncer logged so far, for failure messages.
    pub fn log(&self) -> String {
        read_log(&self.dir)
    }

    /// Spawns a detached shell that waits for this process to end, then stops PgBouncer and
    /// deletes its folder. It runs in its own process group so Ctrl-C does not take it.
    fn watch_this_process(&self) -> Result<(), String> {
        let script = format!(
            "while kill -0 {me} 2>/dev/null && kill -0 {pid} 2>/dev/null; do sleep 0.5; done; \
             kill {pid} 2>/dev/null; sleep 1; rm -rf {dir}",
            me = std::process::id(),
            pid = self.pid,
            dir = self.dir.display()
        );
        crate::pg::spawn_watcher(&script, "PgBouncer")
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // Its watcher removes the folder once it has exited.
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default()
}

/// The daemon's pid, once it has written its pidfile (within 10 s).
fn wait_for_pid(dir: &Path) -> Result<u32, String> {
    for _ in 0..100 {
        if let Some(pid) = std::fs::read_to_string(dir.join("pgbouncer.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return Ok(pid);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("PgBouncer wrote no pidfile within 10 s".to_owned())
}

/// Whether something accepts connections on the loopback port within 10 s.
fn wait_for_port(port: u16) -> bool {
    (0..100).any(|_| {
        let up = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        if !up {
            std::thread::sleep(Duration::from_millis(100));
        }
        up
    })
}
