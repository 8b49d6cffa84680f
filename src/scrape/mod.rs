//! The scrape side of metrics, above the services it reads: the HTTP server of
//! `metrics.listener`: `/metrics` in the Prometheus text format
//! (`/public_metrics` too, where Redpanda users look), `/health` (the process answers) and
//! `/ready` (storage open and listeners bound; 503 before that and while shutting down).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::broker::Broker;

mod state;

/// Binds `addr` (failing with the address if it cannot).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (metrics.listener): {e}"))?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /health and /ready");
    Ok(listener)
}

/// Serves until the broker shuts down.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener) {
    let mut shutdown = broker.shutdown_signal();
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/public_metrics", get(metrics))
        .route("/health", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .with_state(broker);
    let stop = async move { crate::shutdown::requested(&mut shutdown).await };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "metrics listener failed");
    }
}

async fn metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    // Walking every partition and group is blocking work; keep it off the request threads.
    let b = broker.clone();
    let body = tokio::task::spawn_blocking(move || b.metrics.render(state::families(&b)))
        .await
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], body)
}

async fn ready(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    if broker.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
