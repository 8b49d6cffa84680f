//! The broker's stop signal: one `watch` channel that turns true once shutdown begins. Every
//! long-running task (listeners, connections, fetchers, timers) holds a receiver and waits on
//! [`requested`] beside its work.

use tokio::sync::watch;

/// Resolves once shutdown has begun (at once if it already has).
pub async fn requested(rx: &mut watch::Receiver<bool>) {
    // The guard wait_for returns is dropped here so callers' futures stay Send.
    let _ = rx.wait_for(|stopping| *stopping).await.map(|_| ());
}
