//! PostgreSQL as it runs highly available: a one-member etcd, two PostgreSQL nodes under
//! Patroni and HAProxy routing to whichever is primary by Patroni's REST health check, all
//! Debian's packages, on free loopback ports, as the `postgres` user when we are root.
//! Everything is stopped and its folder removed when the value drops, or by a watcher when the
//! test process dies.
//!
//! Patroni is set for a quick failover: `loop_wait` 1 s, and `primary_start_timeout` 0, so a
//! primary whose PostgreSQL crashed hands over at once instead of restarting in place.
//! `synchronous_mode` is the caller's choice; `maximum_lag_on_failover` is large so that an
//! asynchronous standby is promoted whatever it missed, which is what asynchronous
//! replication allows and what the asynchronous test shows.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to tell someone whose machine lacks a part.
pub const HOW_TO_GET_PATRONI: &str = "the failover tests need Debian's patroni, etcd-server and \
haproxy (`apt-get install patroni etcd-server haproxy`; the test command installs them when it \
runs as root) and the PostgreSQL server binaries";

/// The programs, found on this machine.
struct Programs {
    etcd: PathBuf,
    patroni: PathBuf,
    haproxy: PathBuf,
    pg_bin: PathBuf,
}

impl Programs {
    fn find() -> Result<Programs, String> {
        let find = |names: &[&str]| {
            names
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
                .ok_or_else(|| format!("{} not found: {HOW_TO_GET_PATRONI}", names[0]))
        };
        Ok(Programs {
            etcd: find(&["/usr/bin/etcd"])?,
            patroni: find(&["/usr/bin/patroni"])?,
            haproxy: find(&["/usr/sbin/haproxy", "/usr/bin/haproxy"])?,
            pg_bin: crate::pg::bin_dir()
                .filter(|dir| dir.join("pg_controldata").is_file())
                .or_else(crate::pg::versioned_bin_dir)
                .ok_or_else(|| HOW_TO_GET_PATRONI.to_owned())?,
        })
    }
}

/// One PostgreSQL node: its Patroni's REST port and its server's port.
#[derive(Debug, Clone, Copy)]
struct Node {
    rest: u16,
    pg: u16,
}

/// A running highly available cluster of two nodes.
#[derive(Debug)]
pub struct HaCluster {
    dir: PathBuf,
    nodes: [Node; 2],
    haproxy_port: u16,
    synchronous: bool,
    /// etcd, the two Patronis, HAProxy; PostgreSQL is Patroni's child.
    children: Vec<Child>,
}

/// The user and group ids the daemons run as: `postgres` when we are root (PostgreSQL refuses
/// root), ours otherwise.
fn daemon_ids() -> Result<Option<(u32, u32)>, String> {
    if !crate::pg::running_as_root() {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| format!("cannot read /etc/passwd: {e}"))?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"postgres") && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .map(Some)
        .ok_or_else(|| "running as root needs a 'postgres' user for the daemons".to_owned())
}

impl HaCluster {
    /// Starts etcd, two Patroni nodes (`synchronous_mode` as given) and HAProxy, and waits
    /// until a primary answers through HAProxy and the other node replicates from it.
    ///
    /// A cluster that does not come up is stopped and started once more on new ports in a
    /// new folder, and the first failure is printed: Patroni's bootstrap can fail on a loaded
    /// machine for reasons that are not the tests' subject (a port chosen free and taken by
    /// another process's connection before PostgreSQL binds it, a start that outlasts
    /// Patroni's timeout), and the tests are about what happens once it runs.
    pub fn start(synchronous: bool) -> Result<HaCluster, String> {
        Self::start_once(synchronous).or_else(|first| {
            let said = format!(
                "the Patroni cluster did not start; trying once more on new ports:\n{first}\n"
            );
            let _ = std::io::stderr().lock().write_all(said.as_bytes());
            Self::start_once(synchronous)
                .map_err(|second| format!("{second}\n--- the first try\n{first}"))
        })
    }

    fn start_once(synchronous: bool) -> Result<HaCluster, String> {
        let programs = Programs::find()?;
        let ids = daemon_ids()?;
        let dir = tempfile::Builder::new()
            .prefix("outbox-ha-")
            .tempdir()
            .map_err(|e| format!("cannot create a folder for the cluster: {e}"))?
            .keep();
        let port = crate::pg::free_port;
        let (etcd_client, etcd_peer) = (port()?, port()?);
        let nodes = [
            Node {
                rest: port()?,
                pg: port()?,
            },
            Node {
                rest: port()?,
                pg: port()?,
            },
        ];
        let mut cluster = HaCluster {
            dir,
            nodes,
            haproxy_port: port()?,
            synchronous,
            children: Vec::new(),
        };
        for (i, node) in nodes.iter().enumerate() {
            let yaml = cluster.patroni_config(i, *node, etcd_client, &programs.pg_bin);
            write(&cluster.dir.join(format!("n{i}.yml")), &yaml)?;
        }
        write(&cluster.dir.join("haproxy.cfg"), &cluster.haproxy_config())?;
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(&cluster.dir, Some(uid), Some(gid))
                .map_err(|e| format!("cannot give the cluster's folder to postgres: {e}"))?;
            for entry in std::fs::read_dir(&cluster.dir).map_err(|e| e.to_string())? {
                let path = entry.map_err(|e| e.to_string())?.path();
                std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
            }
        }
        let etcd_url = |p: u16| format!("http://127.0.0.1:{p}");
        let etcd_args = vec![
            "--name".to_owned(),
            "e0".to_owned(),
            "--data-dir".to_owned(),
            cluster.path("etcd"),
            "--listen-client-urls".to_owned(),
            etcd_url(etcd_client),
            "--advertise-client-urls".to_owned(),
            etcd_url(etcd_client),
            "--listen-peer-urls".to_owned(),
            etcd_url(etcd_peer),
            "--initial-advertise-peer-urls".to_owned(),
            etcd_url(etcd_peer),
            "--initial-cluster".to_owned(),
            format!("e0={}", etcd_url(etcd_peer)),
        ];
        cluster.spawn(&programs.etcd, &etcd_args, "etcd.log", ids)?;
        wait(Duration::from_secs(20), "etcd listens", || {
            TcpStream::connect(("127.0.0.1", etcd_client)).is_ok()
        })
        .map_err(|e| cluster.explain(&e))?;
        for i in 0..2 {
            let config = cluster.path(&format!("n{i}.yml"));
            cluster.spawn(&programs.patroni, &[config], &format!("n{i}.log"), ids)?;
        }
        let haproxy_config = cluster.path("haproxy.cfg");
        cluster.spawn(
            &programs.haproxy,
            &["-f".to_owned(), haproxy_config],
            "haproxy.log",
            ids,
        )?;
        // Written once every daemon runs: its script names them all (a failure before this
        // point drops the cluster, which stops what started).
        cluster.watch_this_process()?;
        cluster.wait_healthy(Duration::from_secs(90))?;
        Ok(cluster)
    }

    fn patroni_config(&self, i: usize, node: Node, etcd: u16, pg_bin: &Path) -> String {
        // fsync off: a SIGKILL of PostgreSQL leaves the operating system's page cache whole,
        // so crash recovery is exact without it; only a power cut would need it.
        format!(
            "scope: outbox-ha\n\
             name: n{i}\n\
             log: {{level: INFO}}\n\
             restapi: {{listen: '127.0.0.1:{rest}', connect_address: '127.0.0.1:{rest}'}}\n\
             etcd3: {{hosts: '127.0.0.1:{etcd}'}}\n\
             bootstrap:\n\
             \x20 dcs:\n\
             \x20   ttl: 20\n\
             \x20   loop_wait: 1\n\
             \x20   retry_timeout: 5\n\
             \x20   primary_start_timeout: 0\n\
             \x20   maximum_lag_on_failover: 1073741824\n\
             \x20   synchronous_mode: {sync}\n\
             \x20   postgresql:\n\
             \x20     use_pg_rewind: true\n\
             \x20     parameters: {{wal_log_hints: 'on', max_connections: 300, fsync: 'off', \
             wal_keep_size: '256MB'}}\n\
             \x20 initdb: [{{encoding: UTF8}}, {{locale: C}}, {{auth: trust}}]\n\
             \x20 pg_hba: ['host all all 127.0.0.1/32 trust', 'host replication all 127.0.0.1/32 trust']\n\
             postgresql:\n\
             \x20 listen: '127.0.0.1:{pg}'\n\
             \x20 connect_address: '127.0.0.1:{pg}'\n\
             \x20 data_dir: '{dir}/n{i}'\n\
             \x20 bin_dir: '{bin}'\n\
             \x20 pgpass: '{dir}/pgpass{i}'\n\
             \x20 authentication:\n\
             \x20   replication: {{username: postgres}}\n\
             \x20   superuser: {{username: postgres}}\n\
             \x20   rewind: {{username: postgres}}\n\
             \x20 parameters: {{unix_socket_directories: '{dir}'}}\n\
             \x20 remove_data_directory_on_rewind_failure: true\n\
             \x20 remove_data_directory_on_diverged_timelines: true\n",
            rest = node.rest,
            pg = node.pg,
            sync = self.synchronous,
            dir = self.dir.display(),
            bin = pg_bin.display(),
        )
    }

    /// HAProxy as Patroni's documentation sets it up: a TCP listener whose only healthy
    /// server is the one whose Patroni answers 200 to `OPTIONS /primary`; sessions to a server
    /// marked down are cut, so clients reconnect to the new primary.
    fn haproxy_config(&self) -> String {
        let servers: String = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                format!(
                    "    server n{i} 127.0.0.1:{} maxconn 300 check port {}\n",
                    n.pg, n.rest
                )
            })
            .collect();
        format!(
            "global\n    maxconn 1000\n\
             defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 30m\n\
             \x20   timeout server 30m\n    timeout check 1s\n\
             listen primary\n    bind 127.0.0.1:{port}\n    option httpchk OPTIONS /primary\n\
             \x20   http-check expect status 200\n\
             \x20   default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions\n\
             {servers}",
            port = self.haproxy_port
        )
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn spawn(
        &mut self,
        program: &Path,
        args: &[String],
        log: &str,
        ids: Option<(u32, u32)>,
    ) -> Result<(), String> {
        let log_file = std::fs::File::create(self.dir.join(log))
            .map_err(|e| format!("cannot create {log}: {e}"))?;
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(self.dir.join(log), Some(uid), Some(gid))
                .map_err(|e| e.to_string())?;
        }
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .process_group(0);
        if let Some((uid, gid)) = ids {
            cmd.uid(uid).gid(gid);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        self.children.push(child);
        Ok(())
    }

    /// The URL of database `db` through HAProxy: what applications use.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.haproxy_port)
    }

    /// The URL of database `db` on node `node` directly, whatever its role.
    pub fn node_url(&self, node: usize, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.nodes[node].pg)
    }

    /// The node whose Patroni says it is the primary, if one does.
    pub fn primary(&self) -> Option<usize> {
        (0..2).find(|&i| self.rest_status(i, "/primary") == Some(200))
    }

    /// Whether node `node` is a replica that follows the primary: a synchronous standby in
    /// synchronous mode, a streaming replica otherwise.
    fn follows(&self, node: usize) -> bool {
        let check = if self.synchronous {
            "/sync"
        } else {
            "/replica"
        };
        self.rest_status(node, check) == Some(200)
    }

    /// Waits until a primary answers through HAProxy and the other node follows it.
    pub fn wait_healthy(&self, timeout: Duration) -> Result<usize, String> {
        let mut primary = None;
        wait(timeout, "a primary and a following standby", || {
            primary = self.primary();
            primary.is_some_and(|p| self.follows(1 - p) && self.routes_to(p))
        })
        .map_err(|e| self.explain(&e))?;
        Ok(primary.expect("found"))
    }

    /// Waits until a node other than `old` is the primary and HAProxy routes to it; returns it.
    pub fn wait_new_primary(&self, old: usize, timeout: Duration) -> Result<usize, String> {
        let new = 1 - old;
        wait(timeout, "the standby is promoted", || {
            self.rest_status(new, "/primary") == Some(200) && self.routes_to(new)
        })
        .map_err(|e| self.explain(&e))?;
        Ok(new)
    }

    /// Whether a connection through HAProxy reaches node `node`'s server.
    fn routes_to(&self, node: usize) -> bool {
        // HAProxy forwards to a server it marked up; its own check interval is 500 ms, so
        // two checks after Patroni's answer it has seen it.
        let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", self.haproxy_port)) else {
            return false;
        };
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(2)));
        // An SSL request: PostgreSQL answers one byte ('N' here, no TLS configured), which
        // proves a server is behind HAProxy; which one is Patroni's word below.
        if tcp.write_all(&[0, 0, 0, 8, 4, 210, 22, 47]).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        tcp.read_exact(&mut byte).is_ok() && self.rest_status(node, "/primary") == Some(200)
    }

    /// The status of `GET path` on node `node`'s Patroni REST API.
    fn rest_status(&self, node: usize, path: &str) -> Option<u16> {
        let mut tcp = TcpStream::connect(("127.0.0.1", self.nodes[node].rest)).ok()?;
        tcp.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(tcp, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).ok()?;
        std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
    }

    /// The process id of node `node`'s postmaster, from its pid file.
    fn postmaster(&self, node: usize) -> Option<u32> {
        std::fs::read_to_string(self.dir.join(format!("n{node}/postmaster.pid")))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// SIGKILLs the primary's PostgreSQL, its postmaster and every backend at once, as a crash
    /// would; its Patroni lives on and hands over. Returns the node that was primary.
    pub fn crash_primary(&self) -> Result<usize, String> {
        let primary = self.primary().ok_or("no primary to crash")?;
        let pid = self
            .postmaster(primary)
            .ok_or("the primary has no postmaster.pid")?;
        let mut pids = children_of(pid);
        pids.push(pid);
        kill("-KILL", &pids);
        Ok(primary)
    }

    /// Stops the primary's WAL senders (SIGSTOP), so what it commits from now on reaches no
    /// standby: replication lag, as a slow network or a busy standby makes it. Returns them
    /// for [`HaCluster::resume`]. Only meaningful without synchronous mode, where commits
    /// would otherwise wait for the standby.
    pub fn hold_replication(&self) -> Result<Vec<u32>, String> {
        let primary = self.primary().ok_or("no primary")?;
        let pid = self.postmaster(primary).ok_or("no postmaster.pid")?;
        let senders: Vec<u32> = children_of(pid)
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.contains("walsender"))
            })
            .collect();
        if senders.is_empty() {
            return Err(self.explain("the primary has no WAL sender to hold"));
        }
        kill("-STOP", &senders);
        Ok(senders)
    }

    /// SIGCONT to processes held by [`HaCluster::hold_replication`] (if they still exist).
    pub fn resume(&self, pids: &[u32]) {
        kill("-CONT", pids);
    }

    /// What each daemon logged: its first errors (a traceback's tail rarely says why), then
    /// its last lines, for failure messages.
    pub fn explain(&self, what: &str) -> String {
        let tail = |name: &str| {
            let text = std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let errors: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|l| {
                    ["ERROR", "FATAL", "CRITICAL", "could not", "in use"]
                        .iter()
                        .any(|w| l.contains(w))
                })
                .take(12)
                .collect();
            format!(
                "(first errors)\n{}\n(last lines)\n{}",
                errors.join("\n"),
                lines[lines.len().saturating_sub(15)..].join("\n")
            )
        };
        format!(
            "{what}\n--- n0.log\n{}\n--- n1.log\n{}\n--- haproxy.log\n{}",
            tail("n0.log"),
            tail("n1.log"),
            tail("haproxy.log")
        )
    }

    /// Spawns a detached shell that waits for this process to end, then stops everything the
    /// cluster started and deletes its folder.
    fn watch_this_process(&self) -> Result<(), String> {
        let script = format!(
            "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; {stop}",
            me = std::process::id(),
            stop = self.stop_script()
        );
        crate::pg::spawn_watcher(&script, "HA cluster")
    }

    /// Shell commands that stop the daemons (SIGKILL, so no Patroni restarts anything), the two
    /// PostgreSQL servers and their backends, and remove the folder.
    fn stop_script(&self) -> String {
        let pids: Vec<String> = self.children.iter().map(|c| c.id().to_string()).collect();
        let dir = self.dir.display();
        let stop_pg: String = (0..2)
            .map(|i| {
                format!(
                    "p=$(head -1 {dir}/n{i}/postmaster.pid 2>/dev/null) && [ -n \"$p\" ] && \
                     kill -KILL $(pgrep -P $p) $p 2>/dev/null; "
                )
            })
            .collect();
        format!(
            "kill -KILL {pids} 2>/dev/null; {stop_pg}sleep 0.5; rm -rf {dir}",
            pids = pids.join(" ")
        )
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        let _ = Command::new("sh")
            .args(["-c", &self.stop_script()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        for child in &mut self.children {
            let _ = child.wait();
        }
    }
}

/// The direct children of process `pid`, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

fn kill(signal: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(signal)
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Polls `ready` every 100 ms until it holds or `timeout` passes.
fn wait(timeout: Duration, what: &str, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while !ready() {
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting until {what}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
