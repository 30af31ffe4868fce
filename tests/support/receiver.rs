//! A recording HTTP destination on 127.0.0.1: it keeps every request it receives (at arrival,
//! before answering, and when it let go of it) and answers from a per-path script: a status,
//! extra headers, a delay, or a hang. Unscripted requests get 200, or what a policy given at
//! start decides.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// One answer of the script.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status to answer.
    pub status: u16,
    /// Extra headers on the answer.
    pub headers: Vec<(String, String)>,
    /// Wait this long before answering.
    pub delay: Duration,
    /// The answer's body.
    pub body: String,
}

impl Reply {
    /// Answer `status` at once.
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            delay: Duration::ZERO,
            body: String::new(),
        }
    }

    /// Add a header to the answer.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Answer only after `delay`.
    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// Answer with this body.
    pub fn body(mut self, body: &str) -> Reply {
        self.body = body.to_owned();
        self
    }
}

/// A request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Headers, lowercase names; repeated headers joined with ", ".
    pub headers: HashMap<String, String>,
    /// The body.
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
    /// The status it was answered with.
    pub status: u16,
    /// How long the answer was held back.
    pub delay: Duration,
    /// When the destination let go of it: about to return the answer (after the delay), or
    /// when the client went away first and the handler was dropped; `None` while it is open.
    /// `[at, done]` is the time the destination was busy with it.
    pub done: Option<Instant>,
}

impl Received {
    /// A header's value, or "" when absent.
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

/// Decides the answer to an unscripted request.
type Policy = Box<dyn FnMut(&Received) -> Reply + Send>;

#[derive(Default)]
struct Inner {
    received: Vec<Received>,
    script: HashMap<String, VecDeque<Reply>>,
    policy: Option<Policy>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("received", &self.received.len())
            .field("script", &self.script)
            .field("policy", &self.policy.is_some())
            .finish()
    }
}

/// The running destination; it stops when dropped.
#[derive(Debug)]
pub struct Receiver {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a destination on a free loopback port.
    pub async fn start() -> Receiver {
        Receiver::start_inner(Inner::default()).await
    }

    /// Starts a destination that answers unscripted requests as `policy` decides (called in
    /// arrival order, one request at a time).
    pub async fn start_with(policy: impl FnMut(&Received) -> Reply + Send + 'static) -> Receiver {
        Receiver::start_inner(Inner {
            policy: Some(Box::new(policy)),
            ..Inner::default()
        })
        .await
    }

    async fn start_inner(inner: Inner) -> Receiver {
        let inner = Arc::new(Mutex::new(inner));
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            addr,
            inner,
            server,
        }
    }

    /// The base URL to configure as a destination.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues answers for requests to `path` (path without query), used in order; once used
    /// up, requests get 200.
    pub fn script(&self, path: &str, replies: impl IntoIterator<Item = Reply>) {
        self.inner
            .lock()
            .unwrap()
            .script
            .entry(path.to_owned())
            .or_default()
            .extend(replies);
    }

    /// Every request received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.inner.lock().unwrap().received.clone()
    }

    /// The requests the destination still holds open (arrived, not yet let go of), in
    /// arrival order.
    pub fn open(&self) -> Vec<Received> {
        let inner = self.inner.lock().unwrap();
        inner
            .received
            .iter()
            .filter(|r| r.done.is_none())
            .cloned()
            .collect()
    }

    /// The `Idempotency-Key` of every request received so far, in arrival order.
    pub fn idempotency_keys(&self) -> Vec<String> {
        self.received()
            .iter()
            .map(|r| r.header("idempotency-key").to_owned())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Sets the `done` instant of request `index` when dropped: once the handler is about to
/// return its answer, or when it is dropped because the client went away.
struct Done {
    inner: Arc<Mutex<Inner>>,
    index: usize,
}

impl Drop for Done {
    fn drop(&mut self) {
        let now = Instant::now();
        if let Ok(mut inner) = self.inner.lock()
            && let Some(r) = inner.received.get_mut(self.index)
        {
            r.done.get_or_insert(now);
        }
    }
}

async fn handle(
    State(shared): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut map: HashMap<String, String> = HashMap::new();
    for (name, value) in &headers {
        let value = value.to_str().unwrap_or("<binary>").to_owned();
        map.entry(name.as_str().to_owned())
            .and_modify(|v| *v = format!("{v}, {value}"))
            .or_insert(value);
    }
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let (reply, done) = {
        let mut inner = shared.lock().unwrap();
        let mut received = Received {
            method: method.to_string(),
            path,
            headers: map,
            body: body.to_vec(),
            at: Instant::now(),
            status: 200,
            delay: Duration::ZERO,
            done: None,
        };
        let scripted = inner
            .script
            .get_mut(uri.path())
            .and_then(VecDeque::pop_front);
        let reply = match (scripted, inner.policy.as_mut()) {
            (Some(reply), _) => reply,
            (None, Some(policy)) => policy(&received),
            (None, None) => Reply::status(200),
        };
        received.status = reply.status;
        received.delay = reply.delay;
        let done = Done {
            inner: shared.clone(),
            index: inner.received.len(),
        };
        inner.received.push(received);
        (reply, done)
    };
    tokio::time::sleep(reply.delay).await;
    let mut response = (
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK),
        reply.body,
    )
        .into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            axum::http::HeaderValue::from_str(&value).unwrap(),
        );
    }
    drop(done);
    response
}
