//! What the outboxctl test binaries share: running the real binary against a database, and
//! reading what it printed. Each binary uses its own part; the rest is allowed to go unused.

#![allow(dead_code)]

use std::process::Output;

/// Runs outboxctl on the database of `url` (as its login) with `args`, as the operator `ana`,
/// without blocking the runtime an in-process dispatcher uses.
pub(crate) async fn ctl(url: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(args)
        .env("OUTBOX_DATABASE_URL", url)
        .env("USER", "ana")
        .env_remove("OUTBOX_KEYS")
        .output()
        .await
        .expect("run outboxctl")
}

/// The exit code and both outputs, for a failed assertion to show.
pub(crate) fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The one JSON object a successful `--json` call printed.
pub(crate) fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

/// A dispatcher in this process, run from a config file's text, until stopped.
pub(crate) struct Dispatcher {
    shutdown: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<(), outbox_dispatcher::Error>>,
}

impl Dispatcher {
    /// Starts the daemon of `config` (a dispatcher config file's text).
    pub(crate) fn start(config: &str) -> Dispatcher {
        let config =
            outbox_dispatcher::Config::load(Some(config), &Default::default()).expect("config");
        let shutdown = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(outbox_dispatcher::run(config, shutdown.clone()));
        Dispatcher { shutdown, task }
    }

    /// Stops it (it writes its counts for the charts as it goes); it must end without error.
    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("task").expect("dispatcher");
    }
}

/// `outboxctl web --config` as a real process on a free loopback port, until [`Web::stop`].
pub(crate) struct Web {
    child: std::process::Child,
    /// Where it serves, ending in `/`.
    pub(crate) url: String,
    /// `host:port`.
    address: String,
    stderr: std::thread::JoinHandle<String>,
    _config: tempfile::NamedTempFile,
}

impl Web {
    /// Serves the console of `config` (a dispatcher config file's text), its pages reloading
    /// every `refresh`.
    pub(crate) async fn start(config: &str, refresh: &str) -> Web {
        use std::io::{BufRead as _, BufReader};
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), config).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
            .args([
                "web",
                "--listen",
                "127.0.0.1:0",
                "--refresh",
                refresh,
                "--config",
            ])
            .arg(file.path())
            .env_remove("OUTBOX_DATABASE_URL")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start outboxctl web");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let (url, stderr) = tokio::task::spawn_blocking(move || {
            let mut seen = String::new();
            while let Some(Ok(line)) = lines.next() {
                seen += &line;
                seen.push('\n');
                if let Some(at) = line.find("http://") {
                    let url = line[at..].split_whitespace().next().unwrap().to_owned();
                    // Keep reading, so the pipe never fills, until the process ends.
                    let rest = std::thread::spawn(move || {
                        lines
                            .map_while(Result::ok)
                            .fold(seen, |all, l| all + &l + "\n")
                    });
                    return (url, rest);
                }
            }
            panic!("outboxctl web printed no address:\n{seen}");
        })
        .await
        .unwrap();
        let address = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        Web {
            child,
            url,
            address,
            stderr,
            _config: file,
        }
    }

    /// One plain HTTP/1.0 request, as a client without the console's pages would send it: the
    /// status code and the whole answer.
    pub(crate) async fn request(&self, head: String, body: String) -> (u16, String) {
        use std::io::{Read as _, Write as _};
        let address = self.address.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = std::net::TcpStream::connect(&address).expect("connect");
            write!(c, "{head}Host: {address}\r\n\r\n{body}").expect("send");
            let mut answer = String::new();
            c.read_to_string(&mut answer).expect("answer");
            let status = answer
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            (status, answer)
        })
        .await
        .unwrap()
    }

    /// `GET path`.
    pub(crate) async fn get(&self, path: &str) -> (u16, String) {
        self.request(format!("GET {path} HTTP/1.0\r\n"), String::new())
            .await
    }

    /// A form's `POST path` with the `cookie` header.
    pub(crate) async fn post(&self, path: &str, cookie: &str, form: &str) -> (u16, String) {
        let head = format!(
            "POST {path} HTTP/1.0\r\nCookie: {cookie}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            form.len()
        );
        self.request(head, form.to_owned()).await
    }

    /// SIGTERM; it must exit 0, saying it stopped.
    pub(crate) fn stop(mut self) {
        outbox_tests::signal(&self.child, "-TERM");
        let status = self.child.wait().unwrap();
        let stderr = self.stderr.join().unwrap();
        assert!(status.success(), "outboxctl web exited {status}: {stderr}");
        assert!(stderr.contains("outboxctl web: stopped"), "{stderr}");
    }
}
