//! The chaos run's third-party API: a real HTTP server on 127.0.0.1 that records every request
//! at arrival and, from a seeded random source, answers 503 or stalls past the dispatcher's
//! timeout before answering 200.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use outbox_tests::Rng;

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 200 at once: the dispatcher learnt it was delivered.
    Ok,
    /// 503: the dispatcher retries.
    Unavailable,
    /// 200 only after [`STALL`], longer than the dispatcher's timeout: it never learnt the
    /// outcome and retries.
    Stalled,
}

/// A request as it arrived.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// The `Idempotency-Key` header.
    pub(crate) key: String,
    /// The `X-Fencing-Token` header.
    pub(crate) token: String,
    /// The body.
    pub(crate) body: Vec<u8>,
    /// What the destination answered.
    pub(crate) answer: Answer,
}

/// How long a stalled request is held: past the dispatcher's 1 s timeout.
const STALL: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct Inner {
    rng: Rng,
    requests: Vec<Request>,
}

/// The running destination; it stops when dropped.
#[derive(Debug)]
pub(crate) struct Destination {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Destination {
    /// Starts on a free loopback port; `seed` fixes the sequence of answers.
    pub(crate) async fn start(seed: u64) -> Destination {
        let inner = Arc::new(Mutex::new(Inner {
            rng: Rng::new(seed),
            requests: Vec::new(),
        }));
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the destination");
        let addr = listener.local_addr().expect("destination address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Destination {
            addr,
            inner,
            server,
        }
    }

    /// The base URL for the dispatcher's config.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.inner.lock().unwrap().requests.clone()
    }
}

impl Drop for Destination {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let answer = {
        let mut inner = inner.lock().unwrap();
        let answer = match inner.rng.below(100) {
            0..10 => Answer::Unavailable,
            10..14 => Answer::Stalled,
            _ => Answer::Ok,
        };
        inner.requests.push(Request {
            key: header("idempotency-key"),
            token: header("x-fencing-token"),
            body: body.to_vec(),
            answer,
        });
        answer
    };
    match answer {
        Answer::Ok => StatusCode::OK,
        Answer::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Answer::Stalled => {
            tokio::time::sleep(STALL).await;
            StatusCode::OK
        }
    }
}
