//! The network side: listeners, one task per connection, length-prefixed frames, responses
//! written in request order, graceful shutdown.
//!
//! A connection reads a frame, hands it to [`crate::dispatch`], and queues the response for a
//! writer task, so the next request is read and handled while the previous response is still
//! being written. Requests of one connection are handled one at a time, as Kafka does: that
//! keeps an idempotent producer's pipelined batches in order and makes responses leave in
//! request order by construction. A frame that cannot be parsed, an unknown API or an
//! unsupported version closes that connection only.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::broker::Broker;
use crate::dispatch::{self, Outcome};
use crate::handlers::Connection;
use crate::wire::frame::FrameReader;
use crate::wire::splice::Pieces;

/// Responses queued for the writer per connection before the reader waits.
const RESPONSES_QUEUED_MAX: usize = 8;

/// Binds every configured listener; fails with the address if one cannot be bound.
pub async fn bind(broker: &Broker) -> anyhow::Result<Vec<(String, TcpListener)>> {
    let mut out = Vec::new();
    for l in &broker.config.listeners {
        let addr = l.bind_addr();
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (listener {}): {e}", l.name))?;
        tracing::info!(listener = %l.name, addr = %listener.local_addr()?, "listening");
        out.push((l.name.clone(), listener));
    }
    Ok(out)
}

/// Accepts connections until shutdown, then waits for open connections to finish the
/// request they are handling.
pub async fn serve(broker: Arc<Broker>, listeners: Vec<(String, TcpListener)>) {
    let mut accepts = JoinSet::new();
    for (name, listener) in listeners {
        let broker = broker.clone();
        let name: Arc<str> = name.into();
        accepts.spawn(async move {
            let mut shutdown = broker.shutdown_signal();
            let mut spawned = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, peer)) => {
                            spawned.spawn(connection(broker.clone(), name.clone(), stream, peer));
                        }
                        Err(e) => {
                            // Typically EMFILE: back off instead of spinning.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                    },
                    _ = crate::shutdown::requested(&mut shutdown) => break,
                    Some(_) = spawned.join_next(), if !spawned.is_empty() => {}
                }
            }
            drop(listener);
            while spawned.join_next().await.is_some() {}
        });
    }
    while accepts.join_next().await.is_some() {}
}

async fn connection(broker: Arc<Broker>, listener: Arc<str>, stream: TcpStream, peer: SocketAddr) {
    let _open = broker.metrics.connection_opened(&listener);
    let _ = stream.set_nodelay(true);
    let (rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Pieces>(RESPONSES_QUEUED_MAX);
    let writer = tokio::spawn(async move {
        while let Some(mut first) = rx.recv().await {
            // Vectored: a fetch response's record sets are pieces of their own.
            if wr.write_all_buf(&mut first).await.is_err() {
                return;
            }
            // Drain what is already queued before the flush, so pipelined responses share it.
            while let Ok(mut more) = rx.try_recv() {
                if wr.write_all_buf(&mut more).await.is_err() {
                    return;
                }
            }
            if wr.flush().await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
    });

    let mut frames = FrameReader::new(rd, broker.config.socket_request_bytes_max as usize);
    let mut shutdown = broker.shutdown_signal();
    let ctx = Connection { listener, peer };
    loop {
        let next = tokio::select! {
            f = frames.next() => f,
            _ = crate::shutdown::requested(&mut shutdown) => break,
        };
        let frame = match next {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(peer = %peer, error = %e, "closing connection: bad frame");
                break;
            }
        };
        match dispatch::handle(&broker, &ctx, frame).await {
            Outcome::Respond(bytes) => {
                if tx.send(bytes).await.is_err() {
                    break;
                }
            }
            Outcome::NoResponse => {}
            Outcome::Close(reason) => {
                tracing::warn!(peer = %peer, reason = %reason, "closing connection");
                break;
            }
        }
    }
    drop(tx);
    let _ = writer.await;
    // KIP-932: a share session ends with the connection it was opened on.
    broker
        .shares
        .connection_closed(&(ctx.listener.clone(), ctx.peer));
}
