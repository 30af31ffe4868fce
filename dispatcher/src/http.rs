//! The one listener: `/metrics` (Prometheus text), `/healthz` (the process runs) and
//! `/readyz` (the database answers: 503 until it does). Built by one function so tests can
//! serve it in-process. With `[console] enabled` the daemon merges the console's routes into
//! it (`console`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

/// What the endpoints read.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Whether the last database call succeeded.
    pub ready: Arc<AtomicBool>,
    /// The metrics recorder.
    pub metrics: PrometheusHandle,
}

/// The router of the health and metrics listener.
pub fn router(probe: Probe) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(p): State<Probe>| async move { p.metrics.render() }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(p): State<Probe>| async move {
                if p.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ready\n")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "database unreachable\n")
                }
            }),
        )
        .with_state(probe)
}
