//! Connections to SQL Server: opening one (TCP with nodelay, TLS with the process's rustls
//! provider, login, one redirect followed, session options), a bb8 pool of them, and the
//! transaction type the flows use. A connection that failed below the server's own errors
//! (I/O, protocol, a timed-out command), or that is returned with a transaction still open, is
//! discarded instead of reused: SQL Server rolls back what a closed connection left open.

use std::ops::{Deref, DerefMut};

use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncWriteCompatExt};

use super::config::MssqlUrl;

/// A tiberius client over tokio's TCP stream: the connection type of this backend, and the
/// type of a caller's own connection for `Store::op_enqueue_in`.
pub type Client = tiberius::Client<Compat<TcpStream>>;

/// Session options every outbox connection runs with. `XACT_ABORT ON`: any error inside a
/// transaction rolls all of it back, so nothing is half written. The `ANSI_*`, `ARITHABORT`,
/// `CONCAT_NULL_YIELDS_NULL` and `QUOTED_IDENTIFIER` settings are the ones filtered indexes
/// require of every statement that writes the table (error 1934 otherwise).
const SESSION_SETUP: &str = include_str!("../../sql/mssql/session_setup.sql");

/// Opens one connection as `url` says, within its connect timeout.
pub(crate) async fn open(url: &MssqlUrl) -> Result<Client, tiberius::error::Error> {
    let opened = tokio::time::timeout(url.connect_timeout, async {
        match login(url.config.clone()).await {
            // Azure SQL's gateway may send the client to the node that holds the database.
            Err(tiberius::error::Error::Routing { host, port }) => {
                let mut config = url.config.clone();
                config.host(host);
                config.port(port);
                login(config).await
            }
            other => other,
        }
    })
    .await;
    let mut client = opened.map_err(|_| tiberius::error::Error::Io {
        kind: std::io::ErrorKind::TimedOut,
        message: format!(
            "no connection within the connect timeout of {:?}",
            url.connect_timeout
        ),
    })??;
    client
        .simple_query(SESSION_SETUP)
        .await?
        .into_results()
        .await?;
    Ok(client)
}

async fn login(config: tiberius::Config) -> Result<Client, tiberius::error::Error> {
    let tcp = TcpStream::connect(config.get_addr()).await?;
    tcp.set_nodelay(true)?;
    tiberius::Client::connect(config, tcp.compat_write()).await
}

/// A pooled connection and what the pool must know about it.
#[derive(Debug)]
pub(crate) struct Pooled {
    pub(crate) client: Client,
    /// A transaction was begun and neither committed nor rolled back.
    pub(crate) in_transaction: bool,
    /// A failure left the connection unusable (or in an unknown state).
    pub(crate) broken: bool,
}

/// Whether an error leaves its connection unusable: I/O, TLS, protocol and decoding errors
/// (the response may be half read), and server errors of severity 20 and above (fatal to the
/// session).
pub(crate) fn breaks_connection(e: &tiberius::error::Error) -> bool {
    match e {
        tiberius::error::Error::Server(token) => token.class() >= 20,
        _ => true,
    }
}

/// The bb8 manager: opens connections and tells which may be reused.
#[derive(Debug, Clone)]
pub(crate) struct Manager {
    pub(crate) url: MssqlUrl,
}

impl bb8::ManageConnection for Manager {
    type Connection = Pooled;
    type Error = tiberius::error::Error;

    async fn connect(&self) -> Result<Pooled, tiberius::error::Error> {
        Ok(Pooled {
            client: open(&self.url).await?,
            in_transaction: false,
            broken: false,
        })
    }

    async fn is_valid(&self, conn: &mut Pooled) -> Result<(), tiberius::error::Error> {
        let checked = async {
            conn.client
                .simple_query("SELECT 1")
                .await?
                .into_results()
                .await
        };
        match checked.await {
            Ok(_) => Ok(()),
            Err(e) => {
                conn.broken = true;
                Err(e)
            }
        }
    }

    fn has_broken(&self, conn: &mut Pooled) -> bool {
        conn.broken || conn.in_transaction
    }
}

/// A connection of the pool, checked out.
pub(crate) type PoolConn = bb8::PooledConnection<'static, Manager>;

/// A transaction on a pooled connection. Dropped without [`Tx::commit`] or [`Tx::rollback`]
/// (an error returned early), its connection is closed instead of reused, which rolls the
/// transaction back on the server.
#[derive(Debug)]
pub(crate) struct Tx {
    pub(crate) conn: PoolConn,
}

impl Deref for Tx {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.conn.client
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.conn.client
    }
}
