//! A TCP relay on a free port in front of a test's server, which can hold back each of the
//! server's answers for a while (a slow server, loaded or recovering after a failover, as its
//! clients see it), and each piece of what the clients send (a network queue: a request that
//! left the client arrives that much later, whatever became of the client meanwhile). Each
//! piece waits for the hold in force when it arrived, and pieces keep their order.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running relay; it stops accepting when dropped.
#[derive(Debug)]
pub struct SlowLink {
    ip: std::net::IpAddr,
    port: u16,
    hold_ms: Arc<AtomicU64>,
    queue_ms: Arc<AtomicU64>,
    last_sent: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl SlowLink {
    /// Starts relaying to the host and port `server_url` names, without a hold, on loopback.
    pub async fn start(server_url: &str) -> SlowLink {
        SlowLink::start_on([127, 0, 0, 1].into(), server_url).await
    }

    /// As [`SlowLink::start`], listening on `ip` (an address of the test's own network
    /// namespace link, say).
    pub async fn start_on(ip: std::net::IpAddr, server_url: &str) -> SlowLink {
        let server = url::Url::parse(server_url).expect("the server's URL");
        let target = format!(
            "{}:{}",
            server.host_str().unwrap_or("127.0.0.1"),
            server.port().unwrap_or(5432)
        );
        let listener = TcpListener::bind((ip, 0)).await.expect("bind a relay");
        let port = listener.local_addr().expect("its address").port();
        let hold_ms = Arc::new(AtomicU64::new(0));
        let queue_ms = Arc::new(AtomicU64::new(0));
        let last_sent = Arc::default();
        let holds = Holds {
            answers: hold_ms.clone(),
            requests: queue_ms.clone(),
            last_sent: Arc::clone(&last_sent),
        };
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (target, holds) = (target.clone(), holds.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&target).await {
                        relay(client, server, holds).await;
                    }
                });
            }
        });
        SlowLink {
            ip,
            port,
            hold_ms,
            queue_ms,
            last_sent,
            accept,
        }
    }

    /// Holds back each piece of the server's answers that arrives from now on for `hold`
    /// (`Duration::ZERO`: none).
    pub fn hold(&self, hold: Duration) {
        self.hold_ms
            .store(hold.as_millis() as u64, Ordering::Relaxed);
    }

    /// Holds back each piece the clients send from now on for `hold` before it goes on to
    /// the server (`Duration::ZERO`: none): a network queue on the way there.
    pub fn queue_requests(&self, hold: Duration) {
        self.queue_ms
            .store(hold.as_millis() as u64, Ordering::Relaxed);
    }

    /// When a client last sent the relay something, by this process's clock.
    pub fn last_sent(&self) -> Option<std::time::Instant> {
        *self.last_sent.lock().unwrap()
    }

    /// `url` with its host and port replaced by the relay's.
    pub fn in_front_of(&self, url: &str) -> String {
        let mut url = url::Url::parse(url).expect("a URL");
        url.set_host(Some(&self.ip.to_string())).expect("a host");
        url.set_port(Some(self.port)).expect("a port");
        url.into()
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The holds in force, in milliseconds: on the server's answers, on what the clients send.
#[derive(Debug, Clone)]
struct Holds {
    answers: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    /// When a client's last piece arrived.
    last_sent: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

/// Relays one connection until both directions end: each piece either way after the hold in
/// force when it arrived. What a client sent before it closed still reaches the server; while
/// requests are held, the server's side stays open until it has answered (as a proxy or load
/// balancer in the path keeps it), so a held request is served, not cut short by the client's
/// close queued behind it.
async fn relay(client: TcpStream, server: TcpStream, holds: Holds) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let (kept_open, ()) = tokio::join!(
        pass(
            client_read,
            server_write,
            holds.requests,
            Some(holds.last_sent)
        ),
        async {
            pass(server_read, client_write, holds.answers, None).await;
        },
    );
    drop(kept_open);
}

/// Copies `from` to `to`, each piece sent once the hold in force when it was read has passed
/// (a queue in between, so a later piece never overtakes an earlier one); then shuts `to`,
/// or, when a hold was in force, returns it open. `seen` notes when each piece arrived.
async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    hold_ms: Arc<AtomicU64>,
    seen: Option<Arc<std::sync::Mutex<Option<std::time::Instant>>>>,
) -> Option<tokio::net::tcp::OwnedWriteHalf> {
    let (queue, mut due) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Some(seen) = &seen {
                *seen.lock().unwrap() = Some(std::time::Instant::now());
            }
            let hold = Duration::from_millis(hold_ms.load(Ordering::Relaxed));
            if queue
                .send((tokio::time::Instant::now() + hold, buf[..n].to_vec()))
                .is_err()
            {
                break;
            }
        }
    };
    let write = async move {
        let mut held = false;
        while let Some((at, piece)) = due.recv().await {
            held |= at > tokio::time::Instant::now();
            tokio::time::sleep_until(at).await;
            if to.write_all(&piece).await.is_err() {
                return None;
            }
        }
        if held {
            return Some(to);
        }
        let _ = to.shutdown().await;
        None
    };
    tokio::join!(read, write).1
}
