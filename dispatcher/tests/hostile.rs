//! Hostile destinations (issue 12, G11): answers full of control bytes, bodies that never end,
//! thousands of headers, a reset mid-body, a redirect to another server, and silence. Each
//! hostile attempt ends as a recorded outcome with clean stored text, its op in a definite
//! state, and a well-behaved op enqueued after it is still delivered: the partition goes on.
//! The destinations are raw TCP servers on 127.0.0.1 that write whatever bytes a case needs.

mod common;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{destination_at, dispatch, post, until_states};
use outbox_dispatcher::deliver::{EXCERPT_LIMIT, READ_LIMIT};
use outbox_producer::Outbox;
use outbox_tests::{AttemptRow, TestDb, conformance, lease, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Fast retries, and only two attempts: hostile ops are dead quickly.
const RETRY: &str = "retry = { base = \"50ms\", cap = \"200ms\", max_attempts = 2 }";

/// A body with NUL, bytes that are not UTF-8, and terminal escapes (colour, bell, carriage return).
const HOSTILE_BODY: &[u8] =
    b"before\0nul \xff\xfe not utf-8 \x1b[31mred\x1b[0m bell\x07 cr\r line\nnext\ttab end";

/// Most answer bytes a destination may get written before the dispatcher hangs up: it reads
/// 64 KiB, the rest is what the two sockets' buffers absorb meanwhile (2-4 MiB seen on
/// loopback). A dispatcher reading on would let the server write its full 256 MiB.
const WRITE_BOUND: usize = 16 << 20;

/// What a raw server does with one request. The connection closes after every answer.
#[derive(Debug, Clone)]
enum Answer {
    /// Write these bytes, then close.
    Bytes(Vec<u8>),
    /// Write this head, then body bytes until the client hangs up (or 256 MiB went out).
    Endless { head: String, chunked: bool },
    /// Write these bytes, wait for the client to read them, then reset the connection.
    Reset(Vec<u8>),
    /// Write nothing; hold the connection until the client hangs up.
    Silence,
}

impl Answer {
    /// A complete answer: `status`, `headers` (each ending in CRLF), then `body`.
    fn whole(status: u16, headers: &str, body: &[u8]) -> Answer {
        let head = format!(
            "HTTP/1.1 {status} {}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
            reason(status),
            body.len()
        );
        Answer::Bytes([head.as_bytes(), body].concat())
    }

    /// `status`, then body chunks forever (`chunked`) or body bytes until close (no length).
    fn endless(status: u16, chunked: bool) -> Answer {
        let framing = if chunked {
            "Transfer-Encoding: chunked\r\n"
        } else {
            ""
        };
        let head = format!(
            "HTTP/1.1 {status} {}\r\n{framing}Connection: close\r\n\r\n",
            reason(status)
        );
        Answer::Endless { head, chunked }
    }

    /// `status` announcing a 1000-byte body, 10 bytes of it, then a reset.
    fn reset_mid_body(status: u16) -> Answer {
        let head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Length: 1000\r\n\r\n0123456789",
            reason(status)
        );
        Answer::Reset(head.into_bytes())
    }

    /// Plays the answer on `stream`: the body bytes written, and when the client hung up if
    /// the server saw it.
    async fn play(self, mut stream: TcpStream) -> (usize, Option<Instant>) {
        match self {
            Answer::Bytes(bytes) => {
                let written = stream.write_all(&bytes).await.map_or(0, |()| bytes.len());
                let _ = stream.shutdown().await;
                (written, None)
            }
            Answer::Endless { head, chunked } => {
                let block = endless_block(chunked);
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return (0, Some(Instant::now()));
                }
                let mut written = 0;
                while written < 256 << 20 {
                    if stream.write_all(&block).await.is_err() {
                        return (written, Some(Instant::now()));
                    }
                    written += block.len();
                }
                (written, None)
            }
            Answer::Reset(bytes) => {
                let written = stream.write_all(&bytes).await.map_or(0, |()| bytes.len());
                // The head must have arrived: the reset is to come in the middle of the body.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = stream.set_zero_linger();
                drop(stream);
                (written, None)
            }
            Answer::Silence => {
                let mut sink = [0u8; 1024];
                while let Ok(1..) = stream.read(&mut sink).await {}
                (0, Some(Instant::now()))
            }
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        302 => "Found",
        400 => "Bad Request",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

/// 16 KiB of body, as one chunk when `chunked`.
fn endless_block(chunked: bool) -> Vec<u8> {
    let data = vec![b'x'; 16 * 1024];
    if chunked {
        [format!("{:x}\r\n", data.len()).as_bytes(), &data, b"\r\n"].concat()
    } else {
        data
    }
}

/// A request as a raw server saw it, and how its answer went.
#[derive(Debug, Clone)]
struct Seen {
    /// Path and query.
    path: String,
    /// The Idempotency-Key header, "" when absent.
    key: String,
    /// When the request had been read.
    at: Instant,
    /// Body bytes of the answer the server managed to write.
    written: usize,
    /// When the server saw the client hang up (a write failed, or a read found the end).
    hung_up: Option<Instant>,
}

#[derive(Debug, Default)]
struct Inner {
    seen: Vec<Seen>,
    /// Answers per path, in order; the last one is repeated. Other paths get 200 "ok".
    script: HashMap<String, VecDeque<Answer>>,
}

impl Inner {
    fn next_answer(&mut self, path: &str) -> Answer {
        match self.script.get_mut(path) {
            Some(answers) if answers.len() > 1 => answers.pop_front().expect("an answer"),
            Some(answers) if !answers.is_empty() => answers[0].clone(),
            _ => Answer::whole(200, "", b"ok"),
        }
    }
}

/// A destination speaking raw HTTP/1.1 bytes on a free loopback port; it stops when dropped.
#[derive(Debug)]
struct RawServer {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    accept: tokio::task::JoinHandle<()>,
}

impl RawServer {
    async fn start() -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind raw server");
        let addr = listener.local_addr().expect("raw server address");
        let inner = Arc::new(Mutex::new(Inner::default()));
        let shared = inner.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        RawServer {
            addr,
            inner,
            accept,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers requests to `path` with `answers` in order, repeating the last.
    fn on(&self, path: &str, answers: impl IntoIterator<Item = Answer>) {
        self.inner
            .lock()
            .unwrap()
            .script
            .insert(path.to_owned(), answers.into_iter().collect());
    }

    /// The requests to `path` so far, in arrival order.
    fn seen(&self, path: &str) -> Vec<Seen> {
        let inner = self.inner.lock().unwrap();
        inner
            .seen
            .iter()
            .filter(|s| s.path == path)
            .cloned()
            .collect()
    }

    /// Every request so far.
    fn seen_all(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One connection: one request, one answer.
async fn serve(mut stream: TcpStream, inner: Arc<Mutex<Inner>>) {
    let Some((path, key)) = read_request(&mut stream).await else {
        return;
    };
    let (index, answer) = {
        let mut inner = inner.lock().unwrap();
        let answer = inner.next_answer(&path);
        inner.seen.push(Seen {
            path,
            key,
            at: Instant::now(),
            written: 0,
            hung_up: None,
        });
        (inner.seen.len() - 1, answer)
    };
    let (written, hung_up) = answer.play(stream).await;
    let mut inner = inner.lock().unwrap();
    let seen = &mut inner.seen[index];
    seen.written = written;
    seen.hung_up = hung_up;
}

/// Reads a request's head up to the blank line and its body per Content-Length: its path and
/// Idempotency-Key. None when the client went away first or sent no HTTP.
async fn read_request(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(n @ 1..) if buf.len() < 1 << 20 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    };
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let (mut length, mut key) = (0, String::new());
    for (name, value) in lines.filter_map(|l| l.split_once(':')) {
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "idempotency-key" => key = value.trim().to_owned(),
            _ => {}
        }
    }
    let mut body = buf.len() - head_end;
    while body < length {
        match stream.read(&mut chunk).await {
            Ok(n @ 1..) => body += n,
            _ => return None,
        }
    }
    Some((path, key))
}

/// The destination `hostile` at `server`, with [`RETRY`] and `extra` keys.
fn hostile(server: &RawServer, extra: &str) -> String {
    destination_at("hostile", &server.url(), &format!("{RETRY}\n{extra}"))
}

/// Enqueues a POST of `key` to `path` at `hostile`, under a resource of its own (so no op
/// waits for another's order key).
async fn enqueue(outbox: &Outbox, path: &str, key: &str) {
    let lease = lease(outbox, &format!("hostile:{key}")).await;
    outbox
        .enqueue(&lease, &post("hostile", path, key))
        .await
        .unwrap();
}

/// Waits until the hostile requests to each of `paths` arrived, then enqueues the well-behaved
/// op `well` to `/well`: it comes after them in the same partition.
async fn then_a_well_behaved_op(outbox: &Outbox, server: &RawServer, paths: &[&str]) {
    wait_until(
        Duration::from_secs(30),
        "the hostile requests arrive",
        || async { paths.iter().all(|p| !server.seen(p).is_empty()) },
    )
    .await;
    enqueue(outbox, "/well", "well").await;
}

/// One case: an op to `hostile` for each (path, key) of `ops`, each under a resource of its
/// own; a dispatcher with `extra` destination keys runs until the hostile requests arrived,
/// then a well-behaved op to `/well` is enqueued after them (same partition), and the
/// dispatcher stops once the ops' states, in enqueue order, satisfy `done`.
async fn run_case(
    db: &TestDb,
    server: &RawServer,
    ops: &[(&str, &str)],
    extra: &str,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) {
    let outbox = db.outbox().await;
    for (path, key) in ops {
        enqueue(&outbox, path, key).await;
    }
    let running = dispatch(db, &hostile(server, extra));
    let paths: Vec<&str> = ops.iter().map(|(path, _)| *path).collect();
    then_a_well_behaved_op(&outbox, server, &paths).await;
    until_states(db, what, done).await;
    running.stop().await;
}

/// The states are `expected`, in enqueue order.
fn states_are(expected: &'static [&'static str]) -> impl Fn(&[String]) -> bool {
    move |states| states == expected
}

/// The attempts of the op whose idempotency key is `key`, in order.
async fn attempts_of(db: &TestDb, key: &str) -> Vec<AttemptRow> {
    let ops = db.ops().await;
    let op = ops
        .iter()
        .find(|o| o.idempotency_key == key)
        .unwrap_or_else(|| panic!("no op {key}"));
    let attempts = db.attempts().await;
    attempts
        .into_iter()
        .filter(|a| a.op_id == op.op_id)
        .collect()
}

fn outcomes(attempts: &[AttemptRow]) -> Vec<(Option<&str>, Option<i32>)> {
    attempts
        .iter()
        .map(|a| (a.outcome.as_deref(), a.http_status))
        .collect()
}

/// Stored text holds no control character but newline and tab.
fn assert_clean(what: &str, text: Option<&str>) {
    let text = text.unwrap_or_default();
    let raw: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() && !matches!(c, '\n' | '\t'))
        .collect();
    assert!(
        raw.is_empty(),
        "{what} holds raw control characters {raw:?}: {text:?}"
    );
}

/// The excerpt of [`HOSTILE_BODY`]: clean, with NUL, ESC and the bytes that are not UTF-8
/// written as escapes, and the readable text kept.
fn assert_escaped_excerpt(attempt: &AttemptRow) {
    let excerpt = attempt.excerpt.as_deref();
    assert_clean("the excerpt", excerpt);
    let excerpt = excerpt.unwrap_or_else(|| panic!("no excerpt: {attempt:?}"));
    for escape in [
        "before\\u0000nul",
        "\\xff\\xfe",
        "\\x1b[31mred",
        "bell\\x07",
    ] {
        assert!(
            excerpt.contains(escape),
            "{escape} missing from {excerpt:?}"
        );
    }
    assert!(excerpt.contains("line\nnext\ttab end"), "{excerpt:?}");
}

/// A 500 (retried) and a 400 (permanent) whose bodies hold NUL, bytes that are not UTF-8 and
/// terminal escapes: both ops are dead, every attempt is recorded with its excerpt escaped,
/// and the op enqueued after them is delivered.
async fn g11_failing_answers_full_of_control_bytes_are_recorded_escaped(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::OPENJSON_KEEPS_ESCAPES) {
        return;
    }
    let server = RawServer::start().await;
    server.on("/500", [Answer::whole(500, "", HOSTILE_BODY)]);
    server.on("/400", [Answer::whole(400, "", HOSTILE_BODY)]);
    run_case(
        &db,
        &server,
        &[("/500", "h500"), ("/400", "h400")],
        "",
        "the hostile ops are dead and the other is delivered",
        states_are(&["dead", "dead", "delivered"]),
    )
    .await;

    let h500 = attempts_of(&db, "h500").await;
    assert_eq!(
        outcomes(&h500),
        [(Some("failed"), Some(500)), (Some("failed"), Some(500))]
    );
    let h400 = attempts_of(&db, "h400").await;
    assert_eq!(outcomes(&h400), [(Some("failed"), Some(400))]);
    for attempt in h500.iter().chain(&h400) {
        assert_escaped_excerpt(attempt);
        assert_clean("the error", attempt.error.as_deref());
    }
    for op in db.ops().await {
        assert_clean("the op's last error", op.last_error.as_deref());
    }
    assert_eq!(server.seen("/well").len(), 1);
}

/// A 200 whose body holds NUL, bytes that are not UTF-8 and terminal escapes: delivered, its
/// excerpt escaped, and the op enqueued after it is delivered too.
async fn g11_a_delivered_answer_full_of_control_bytes_is_recorded_escaped(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::OPENJSON_KEEPS_ESCAPES) {
        return;
    }
    let server = RawServer::start().await;
    server.on("/200", [Answer::whole(200, "", HOSTILE_BODY)]);
    run_case(
        &db,
        &server,
        &[("/200", "h200")],
        "",
        "both ops are delivered",
        states_are(&["delivered", "delivered"]),
    )
    .await;

    let h200 = attempts_of(&db, "h200").await;
    assert_eq!(outcomes(&h200), [(Some("delivered"), Some(200))]);
    assert_escaped_excerpt(&h200[0]);
    assert_clean("the error", h200[0].error.as_deref());
}

/// Bodies that never end (a chunked 200, a 500 without a length): the dispatcher reads 64 KiB,
/// hangs up well before its timeout, and the server could write only a bounded amount.
async fn g11_an_endless_body_is_cut_off_and_recorded(db: TestDb) {
    let server = RawServer::start().await;
    server.on("/endless-200", [Answer::endless(200, true)]);
    server.on("/endless-500", [Answer::endless(500, false)]);
    // A timeout the attempts must not need: the lease (3 s) leaves room for 2 s.
    run_case(
        &db,
        &server,
        &[("/endless-200", "h200"), ("/endless-500", "h500")],
        "timeout = \"2s\"",
        "the 200 is delivered, the 500 dead and the other op delivered",
        states_are(&["delivered", "dead", "delivered"]),
    )
    .await;

    assert_eq!(
        outcomes(&attempts_of(&db, "h200").await),
        [(Some("delivered"), Some(200))]
    );
    let h500 = attempts_of(&db, "h500").await;
    assert_eq!(
        outcomes(&h500),
        [(Some("failed"), Some(500)), (Some("failed"), Some(500))]
    );
    for attempt in h500 {
        let excerpt = attempt.excerpt.unwrap_or_default();
        assert!(excerpt.starts_with("xxxx"), "{excerpt:?}");
        assert!(excerpt.chars().count() <= EXCERPT_LIMIT, "{excerpt:?}");
    }
    let endless = || {
        let mut seen = server.seen("/endless-200");
        seen.extend(server.seen("/endless-500"));
        seen
    };
    wait_until(
        Duration::from_secs(30),
        "the server sees every endless answer's client hang up",
        || async { endless().iter().all(|s| s.hung_up.is_some()) },
    )
    .await;
    for s in endless() {
        let took = s.hung_up.unwrap() - s.at;
        println!(
            "{}: {} bytes written, hung up after {took:?}",
            s.path, s.written
        );
        assert!(took < Duration::from_secs(1), "{s:?}");
        assert!(
            (READ_LIMIT..WRITE_BOUND).contains(&s.written),
            "{} bytes written to {}: reading was not bounded",
            s.written,
            s.path
        );
    }
}

/// 5000 response headers: an outcome is recorded (with its error unless delivered), the op
/// ends dead or delivered, and the op enqueued after it is delivered.
async fn g11_thousands_of_headers_end_as_a_recorded_outcome(db: TestDb) {
    let server = RawServer::start().await;
    let headers: String = (0..5000).map(|n| format!("X-H{n}: v\r\n")).collect();
    server.on("/headers", [Answer::whole(200, &headers, b"ok")]);
    run_case(
        &db,
        &server,
        &[("/headers", "headers")],
        "",
        "the hostile op is finished and the other delivered",
        |s| s.len() == 2 && ["dead", "delivered"].contains(&s[0].as_str()) && s[1] == "delivered",
    )
    .await;

    let attempts = attempts_of(&db, "headers").await;
    println!("attempts of the 5000-header answer: {attempts:?}");
    assert!(!attempts.is_empty());
    for attempt in &attempts {
        assert!(attempt.outcome.is_some(), "{attempt:?}");
        if attempt.outcome.as_deref() != Some("delivered") {
            assert!(attempt.error.is_some(), "no error recorded: {attempt:?}");
        }
        assert_clean("the error", attempt.error.as_deref());
    }
}

/// A reset after 10 of 1000 announced body bytes: the status had arrived, so it decides: the
/// 503 is retried, the 200 delivers. The op enqueued after it is delivered too.
async fn g11_a_reset_mid_body_is_classified_by_its_status(db: TestDb) {
    let server = RawServer::start().await;
    server.on(
        "/reset",
        [Answer::reset_mid_body(503), Answer::reset_mid_body(200)],
    );
    run_case(
        &db,
        &server,
        &[("/reset", "reset")],
        "",
        "both ops are delivered",
        states_are(&["delivered", "delivered"]),
    )
    .await;

    let attempts = attempts_of(&db, "reset").await;
    assert_eq!(
        outcomes(&attempts),
        [(Some("failed"), Some(503)), (Some("delivered"), Some(200))]
    );
    for attempt in &attempts {
        let excerpt = attempt.excerpt.as_deref().unwrap_or_default();
        assert!("0123456789".starts_with(excerpt), "{attempt:?}");
    }
    assert_eq!(server.seen("/reset").len(), 2);
}

/// A 302 to another server: not followed (that server receives nothing); 3xx is permanent, so
/// the op is dead after one attempt recorded as failed with HTTP 302.
async fn g11_a_redirect_to_another_server_is_not_followed(db: TestDb) {
    let (server, elsewhere) = (RawServer::start().await, RawServer::start().await);
    let location = format!("Location: {}/stolen\r\n", elsewhere.url());
    server.on("/redirect", [Answer::whole(302, &location, b"")]);
    run_case(
        &db,
        &server,
        &[("/redirect", "redirect")],
        "",
        "the redirected op is dead and the other delivered",
        states_are(&["dead", "delivered"]),
    )
    .await;

    let attempts = attempts_of(&db, "redirect").await;
    assert_eq!(outcomes(&attempts), [(Some("failed"), Some(302))]);
    assert_eq!(server.seen("/redirect").len(), 1);
    let stolen: Vec<(String, String)> = elsewhere
        .seen_all()
        .into_iter()
        .map(|s| (s.path, s.key))
        .collect();
    assert!(stolen.is_empty(), "the redirect was followed: {stolen:?}");
}

/// A destination that accepts and never answers: each attempt is recorded as unknown after
/// the 1 s timeout, the op is dead after two, and the op enqueued after the first one is
/// delivered without waiting for that timeout.
async fn g11_a_destination_that_never_answers_times_out_as_unknown(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    let server = RawServer::start().await;
    server.on("/silent", [Answer::Silence]);
    run_case(
        &db,
        &server,
        &[("/silent", "silent")],
        "",
        "the silent op is dead and the other delivered",
        states_are(&["dead", "delivered"]),
    )
    .await;

    let attempts = attempts_of(&db, "silent").await;
    assert_eq!(outcomes(&attempts), [(Some("unknown"), None); 2]);
    for attempt in &attempts {
        let error = attempt.error.as_deref().unwrap_or_default();
        assert!(error.contains("timed out"), "{attempt:?}");
    }
    let (silent, well) = (server.seen("/silent"), server.seen("/well"));
    let waited = well[0].at - silent[0].at;
    assert!(
        waited < Duration::from_secs(1),
        "the other op waited {waited:?}, the timeout"
    );
    wait_until(
        Duration::from_secs(30),
        "the server sees the client hang up",
        || async { server.seen("/silent").iter().all(|s| s.hung_up.is_some()) },
    )
    .await;
    for s in server.seen("/silent") {
        let held = s.hung_up.unwrap() - s.at;
        assert!(held >= Duration::from_millis(900), "hung up after {held:?}");
    }
}

conformance!(
    g11_failing_answers_full_of_control_bytes_are_recorded_escaped,
    g11_a_delivered_answer_full_of_control_bytes_is_recorded_escaped,
    g11_an_endless_body_is_cut_off_and_recorded,
    g11_thousands_of_headers_end_as_a_recorded_outcome,
    g11_a_reset_mid_body_is_classified_by_its_status,
    g11_a_redirect_to_another_server_is_not_followed,
    g11_a_destination_that_never_answers_times_out_as_unknown,
);
