//! A TCP relay on a free loopback port in front of a test's server, which can hold back each
//! of the server's answers for a while: a slow server (loaded, or recovering after a
//! failover) as its clients see it, with nothing else in between. What the clients send
//! passes at once; each piece of an answer waits for the hold in force when it arrived.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running relay; it stops accepting when dropped.
#[derive(Debug)]
pub struct SlowLink {
    port: u16,
    hold_ms: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl SlowLink {
    /// Starts relaying to the host and port `server_url` names, without a hold.
    pub async fn start(server_url: &str) -> SlowLink {
        let server = url::Url::parse(server_url).expect("the server's URL");
        let target = format!(
            "{}:{}",
            server.host_str().unwrap_or("127.0.0.1"),
            server.port().unwrap_or(5432)
        );
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a relay");
        let port = listener.local_addr().expect("its address").port();
        let hold_ms = Arc::new(AtomicU64::new(0));
        let hold = hold_ms.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (target, hold) = (target.clone(), hold.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&target).await {
                        relay(client, server, hold).await;
                    }
                });
            }
        });
        SlowLink {
            port,
            hold_ms,
            accept,
        }
    }

    /// Holds back each piece of the server's answers that arrives from now on for `hold`
    /// (`Duration::ZERO`: none).
    pub fn hold(&self, hold: Duration) {
        self.hold_ms
            .store(hold.as_millis() as u64, Ordering::Relaxed);
    }

    /// `url` with its host and port replaced by the relay's.
    pub fn in_front_of(&self, url: &str) -> String {
        let mut url = url::Url::parse(url).expect("a URL");
        url.set_host(Some("127.0.0.1")).expect("a host");
        url.set_port(Some(self.port)).expect("a port");
        url.into()
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Relays one connection until either side closes: the client's bytes at once, the
/// server's after the hold.
async fn relay(client: TcpStream, server: TcpStream, hold_ms: Arc<AtomicU64>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = async {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    };
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let hold = hold_ms.load(Ordering::Relaxed);
            if hold > 0 {
                tokio::time::sleep(Duration::from_millis(hold)).await;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}
