//! `dispatch`, `latency` and `backlog`: the real dispatcher (a child process running the
//! `outbox-dispatcher` binary next to this one) delivering to a minimal 204 server in another
//! child process, against the claim+complete SQL loop without HTTP and against the server's
//! own request rate; enqueue-to-receipt latency; claim cost as the backlog grows.

use crate::report::Row;
use crate::target::Target;

/// The destination process: 204 to everything.
pub(crate) async fn serve_204(port: u16) -> anyhow::Result<()> {
    let app = axum::Router::new().fallback(|| async { axum::http::StatusCode::NO_CONTENT });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}

/// Not built yet.
pub(crate) async fn dispatch(
    _target: &Target,
    _runs: usize,
    _backlog: usize,
) -> anyhow::Result<Vec<Row>> {
    Ok(Vec::new())
}

/// Not built yet.
pub(crate) async fn latency(
    _target: &Target,
    _runs: usize,
    _quick: bool,
) -> anyhow::Result<Vec<Row>> {
    Ok(Vec::new())
}

/// Not built yet.
pub(crate) async fn backlog(
    _target: &Target,
    _runs: usize,
    _quick: bool,
) -> anyhow::Result<Vec<Row>> {
    Ok(Vec::new())
}
