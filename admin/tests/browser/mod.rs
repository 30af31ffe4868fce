//! A real browser for tests: Debian's chromium, headless, with a fresh profile, driven over
//! WebDriver (fantoccini) through Debian's chromedriver, started on a free loopback port and
//! killed when dropped. Missing browser packages fail the test with what to install; only
//! `OUTBOX_SKIP_BROWSER_TESTS=1` turns that into a skip, said loudly.

use std::io::Write as _;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};

/// Debian's `chromium` package.
const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's `chromium-driver` package.
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Set to `1` to skip the browser tests knowingly where chromium cannot be installed.
const SKIP_VAR: &str = "OUTBOX_SKIP_BROWSER_TESTS";

/// Flags that work on these machines: no sandbox (root), no GPU, and none of chromium's own
/// traffic (with no network it otherwise stalls on updates, sync and QUIC probes).
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1400",
];

/// Whether the browser test can run: `true` when chromium and chromedriver are installed;
/// `false`, after printing that the test was skipped, only when [`SKIP_VAR`] asks for it.
/// Panics with what to install otherwise: a browser test never passes without a browser.
pub(crate) fn available() -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var(SKIP_VAR).as_deref() == Ok("1") {
        // Straight to stderr, past the test harness's capture: a skip must be seen.
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: the browser test did not run: {} not found and {SKIP_VAR}=1 ***\n",
            missing.join(" and ")
        );
        return false;
    }
    panic!(
        "the browser test needs Debian's chromium and chromium-driver, and {} is missing: \
         apt-get install chromium chromium-driver (bash ops/test.sh does it when run as root), \
         or set {SKIP_VAR}=1 to skip this test knowingly",
        missing.join(" and ")
    );
}

/// A headless chromium session and the chromedriver serving it.
pub(crate) struct Browser {
    /// The WebDriver session.
    pub(crate) client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free port and opens a session of headless chromium.
    pub(crate) async fn start() -> Browser {
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let mut args: Vec<String> = FLAGS.iter().map(|f| (*f).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let mut caps = fantoccini::wd::Capabilities::new();
        caps.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({ "binary": CHROMIUM, "args": args }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("open a chromium session through chromedriver");
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    /// Ends the session and stops chromedriver.
    pub(crate) async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Where test artifacts are kept: `target/artifacts/`.
pub(crate) fn artifacts() -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target dir")
        .join("artifacts");
    std::fs::create_dir_all(&dir).expect("create target/artifacts");
    dir
}

/// Keeps a screenshot of the page shown as `target/artifacts/<name>`, and prints where.
pub(crate) async fn screenshot(client: &Client, name: &str) {
    let shot = client.screenshot().await.unwrap();
    assert!(shot.starts_with(b"\x89PNG"), "a PNG");
    let path = artifacts().join(name);
    std::fs::write(&path, shot).unwrap();
    eprintln!("screenshot: {}", path.display());
}

/// The attribute `name` of the element `css` finds.
pub(crate) async fn attr(client: &Client, css: &str, name: &str) -> String {
    client
        .find(fantoccini::Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .attr(name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{css} has no {name}"))
}
