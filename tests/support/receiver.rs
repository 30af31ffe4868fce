//! A recording HTTP destination on 127.0.0.1: it keeps every request it receives (at arrival,
//! before answering, and when it let go of it) and answers from a per-path script: a status,
//! extra headers, a delay, or a hang. Unscripted requests get 200, or what a policy given at
//! start decides.
//!
//! Answers may be hostile (G11): any body bytes, header values with bytes that are not UTF-8,
//! a body that never ends ([`Answer::Endless`]) and no answer at all ([`Answer::Reset`]: the
//! connection is reset once the request was read). hyper cannot give the last two, so the
//! handler takes its HTTP/1.1 connection over: every connection is shared between hyper and
//! the handlers of its requests, and once taken hyper neither reads nor writes on it again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The most body bytes an [`Answer::Endless`] writes before it gives up on the client hanging
/// up: far beyond what any client reads of an answer (the dispatcher reads 64 KiB).
pub const ENDLESS_LIMIT: usize = 256 << 20;

/// What a reply sends once its delay is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The status line, the headers and this body, with its `Content-Length`.
    Whole(Vec<u8>),
    /// The status line and the headers, then body blocks of `block` bytes, one every `every`
    /// (at once when zero), without end: chunked, or (not `chunked`) delimited by the close of
    /// the connection, which never comes. It stops when the client hangs up, or after
    /// [`ENDLESS_LIMIT`] bytes.
    Endless {
        /// Body bytes per block.
        block: usize,
        /// The pause before each block.
        every: Duration,
        /// `Transfer-Encoding: chunked`, or no framing at all.
        chunked: bool,
    },
    /// Nothing: the connection is reset (TCP RST) once the request was read. The request is
    /// recorded with status 0.
    Reset,
}

/// One answer of the script.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status to answer; 0 for [`Answer::Reset`].
    pub status: u16,
    /// Extra headers on the answer, in order; a name given twice is sent twice, and a name
    /// given replaces the default of that name (`Content-Type: text/plain; charset=utf-8`).
    /// Values are bytes: anything but NUL, CR and LF (bytes above 0x7f are HTTP's obs-text).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Wait this long before answering.
    pub delay: Duration,
    /// What is sent after the delay.
    pub answer: Answer,
}

impl Reply {
    /// Answer `status` at once.
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            delay: Duration::ZERO,
            answer: Answer::Whole(Vec::new()),
        }
    }

    /// Answer `status` with a body that never ends (see [`Answer::Endless`]).
    pub fn endless(status: u16, block: usize, every: Duration, chunked: bool) -> Reply {
        Reply {
            answer: Answer::Endless {
                block,
                every,
                chunked,
            },
            ..Reply::status(status)
        }
    }

    /// Answer nothing: reset the connection once the request was read.
    pub fn reset() -> Reply {
        Reply {
            answer: Answer::Reset,
            ..Reply::status(0)
        }
    }

    /// Add a header to the answer.
    pub fn header(self, name: &str, value: &str) -> Reply {
        self.header_bytes(name, value.as_bytes())
    }

    /// Add a header whose value is any bytes but NUL, CR and LF.
    pub fn header_bytes(mut self, name: &str, value: &[u8]) -> Reply {
        self.headers.push((name.to_owned(), value.to_vec()));
        self
    }

    /// Answer only after `delay`.
    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// Answer with this body.
    pub fn body(self, body: &str) -> Reply {
        self.body_bytes(body.as_bytes())
    }

    /// Answer with these body bytes, whatever they are.
    pub fn body_bytes(mut self, body: &[u8]) -> Reply {
        self.answer = Answer::Whole(body.to_vec());
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
    /// The status it was answered with (the status line came after `delay`, whatever its body
    /// did next); 0 when it got no answer ([`Answer::Reset`]).
    pub status: u16,
    /// How long the answer was held back.
    pub delay: Duration,
    /// When the destination let go of it: about to return the answer (after the delay), or
    /// when the client went away first and the handler was dropped; for an endless body, when
    /// it stopped writing (the client hung up); for a reset, when it reset the connection;
    /// `None` while it is open. `[at, done]` is the time the destination was busy with it.
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
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(
                Loopback(listener),
                app.into_make_service_with_connect_info::<Connection>(),
            )
            .await;
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
    ConnectInfo(connection): ConnectInfo<Connection>,
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
        received.status = match reply.answer {
            Answer::Reset => 0,
            _ => reply.status,
        };
        received.delay = reply.delay;
        let done = Done {
            inner: shared.clone(),
            index: inner.received.len(),
        };
        inner.received.push(received);
        (reply, done)
    };
    tokio::time::sleep(reply.delay).await;
    let response = match reply.answer {
        Answer::Whole(body) => whole(reply.status, reply.headers, body),
        Answer::Endless {
            block,
            every,
            chunked,
        } => {
            let head = head(reply.status, &reply.headers, chunked);
            endless(connection.take(), head, block, every, chunked).await;
            StatusCode::OK.into_response()
        }
        Answer::Reset => {
            let socket = connection.take();
            // Closed with no linger, the socket sends RST: hyper drops it on its next write.
            let _ = socket.stream.set_zero_linger();
            StatusCode::OK.into_response()
        }
    };
    drop(done);
    response
}

/// A complete answer: `status`, the default content type or the given one, `headers`, `body`.
fn whole(status: u16, headers: Vec<(String, Vec<u8>)>, body: Vec<u8>) -> Response {
    let mut response =
        (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body).into_response();
    let map = response.headers_mut();
    map.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    let mut given = HashSet::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("a valid header name");
        let value = HeaderValue::from_bytes(&value).expect("a header value without NUL, CR, LF");
        if given.insert(name.clone()) {
            map.insert(name, value);
        } else {
            map.append(name, value);
        }
    }
    response
}

/// The head of an endless answer, written by hand: status line, `headers` as given, the framing.
fn head(status: u16, headers: &[(String, Vec<u8>)], chunked: bool) -> Vec<u8> {
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Whatever");
    let mut head = format!("HTTP/1.1 {status} {reason}\r\n").into_bytes();
    for (name, value) in headers {
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    if chunked {
        head.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head
}

/// Writes `head`, then blocks of `block` bytes every `every` until a write fails (the client
/// hung up) or [`ENDLESS_LIMIT`] body bytes went out.
async fn endless(socket: Arc<Socket>, head: Vec<u8>, block: usize, every: Duration, chunked: bool) {
    let data = vec![b'x'; block.max(1)];
    let block = if chunked {
        [format!("{:x}\r\n", data.len()).as_bytes(), &data, b"\r\n"].concat()
    } else {
        data
    };
    if socket.write_all(&head).await.is_err() {
        return;
    }
    let mut written = 0;
    while written < ENDLESS_LIMIT {
        if !every.is_zero() {
            tokio::time::sleep(every).await;
        }
        if socket.write_all(&block).await.is_err() {
            return;
        }
        written += block.len();
    }
}

/// One accepted connection, shared by hyper (through [`Io`]) and the handlers of its requests,
/// which may take it over for an answer hyper cannot give.
#[derive(Debug)]
struct Socket {
    stream: TcpStream,
    /// A handler took the connection over: hyper must not touch it any more.
    taken: AtomicBool,
}

impl Socket {
    fn taken(&self) -> bool {
        self.taken.load(Ordering::SeqCst)
    }

    /// Writes all of `bytes` on the connection, as the handler that took it over.
    async fn write_all(&self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            self.stream.writable().await?;
            match self.stream.try_write(bytes) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// What a handler learns of its request's connection (axum's `ConnectInfo`).
#[derive(Debug, Clone)]
struct Connection(Arc<Socket>);

impl Connection {
    /// Takes the connection over from hyper: from now on its reads wait forever and its
    /// writes fail, so once the handler returned hyper closes the connection.
    fn take(&self) -> Arc<Socket> {
        self.0.taken.store(true, Ordering::SeqCst);
        self.0.clone()
    }
}

impl Connected<IncomingStream<'_, Loopback>> for Connection {
    fn connect_info(stream: IncomingStream<'_, Loopback>) -> Connection {
        stream.remote_addr().clone()
    }
}

/// The receiver's listener: each accepted connection is shared as a [`Socket`].
#[derive(Debug)]
struct Loopback(TcpListener);

impl Listener for Loopback {
    type Io = Io;
    type Addr = Connection;

    async fn accept(&mut self) -> (Io, Connection) {
        loop {
            match self.0.accept().await {
                Ok((stream, _)) => {
                    let socket = Arc::new(Socket {
                        stream,
                        taken: AtomicBool::new(false),
                    });
                    return (Io(socket.clone()), Connection(socket));
                }
                // Out of file descriptors and the like: wait a little, as axum's listener does.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Connection> {
        Err(io::Error::other(
            "a loopback listener has no address of a connection",
        ))
    }
}

/// hyper's side of a [`Socket`].
#[derive(Debug)]
struct Io(Arc<Socket>);

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.0.taken() {
            // The handler that took it over runs in this same task and wakes it.
            return Poll::Pending;
        }
        loop {
            ready!(self.0.stream.poll_read_ready(cx))?;
            match self.0.stream.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            if self.0.taken() {
                return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
            }
            ready!(self.0.stream.poll_write_ready(cx))?;
            match self.0.stream.try_write(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Nothing to do: the socket closes when hyper drops it, right after.
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
