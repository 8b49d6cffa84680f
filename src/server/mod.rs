//! The network side: listeners, one task per connection, length-prefixed frames, responses
//! written in request order, graceful shutdown.
//!
//! A connection reads a frame, hands it to [`crate::dispatch`], and queues the response for a
//! writer task, so the next request is read and handled while the previous response is still
//! being written. Requests of one connection are handled one at a time, as Kafka does: that
//! keeps an idempotent producer's pipelined batches in order and makes responses leave in
//! request order by construction. A frame that cannot be parsed, an unknown API or an
//! unsupported version closes that connection only.
//!
//! On a TLS listener ([`tls`]) the handshake comes first; a client whose handshake fails
//! (plaintext bytes, an untrusted certificate, no shared version) is counted as a failed
//! authentication and loses only its connection.

mod limits;
pub mod tls;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use crate::broker::Broker;
use crate::dispatch::{self, Outcome};
use crate::handlers::{self, Connection};
use crate::security::sasl::Session;
use crate::wire::frame::{FrameError, FrameReader};
use crate::wire::splice::Pieces;

/// Responses queued for the writer per connection before the reader waits.
const RESPONSES_QUEUED_MAX: usize = 8;

/// Bytes of responses a connection may have unsent (queued, or being written) before its
/// reader takes no further request. Kafka mutes a channel from a request's arrival until its
/// response is sent, so a client that stops reading holds one response. Cairn reads ahead
/// while responses are written, which pipelining producers need, but past this many bytes
/// it waits as Kafka does: a client that stops reading holds one fetch response, not
/// `RESPONSES_QUEUED_MAX` of them, and leaves the fetch memory budget to the others.
const RESPONSE_BYTES_UNSENT_MAX: usize = 1 << 20;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// A bound listener, with its TLS if its protocol is SSL.
pub struct Bound {
    pub name: String,
    socket: TcpListener,
    tls: Option<tls::Tls>,
}

/// Reads the stores of every TLS listener, so a bad file or password stops start-up before
/// anything else happens, with the key and the file named.
pub fn load_tls(config: &crate::config::Config) -> anyhow::Result<BTreeMap<String, tls::Tls>> {
    config
        .ssl
        .iter()
        .map(|(name, s)| Ok((name.clone(), tls::Tls::load(name, s)?)))
        .collect()
}

/// Binds every configured listener; fails with the address if one cannot be bound.
pub async fn bind(
    broker: &Broker,
    mut tls: BTreeMap<String, tls::Tls>,
) -> anyhow::Result<Vec<Bound>> {
    let mut out = Vec::new();
    for l in &broker.config.listeners {
        let addr = l.bind_addr();
        let socket = listen(&addr, broker.config.socket_listen_backlog)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (listener {}): {e}", l.name))?;
        let tls = tls.remove(&l.name);
        tracing::info!(
            listener = %l.name,
            addr = %socket.local_addr()?,
            tls = tls.is_some(),
            "listening"
        );
        out.push(Bound {
            name: l.name.clone(),
            socket,
            tls,
        });
    }
    Ok(out)
}

/// Listens on `addr` (host:port, the host resolved; the first of its addresses that can be
/// bound) with `backlog` connections pending at most.
async fn listen(addr: &str, backlog: u32) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // As std and mio bind a listener: a restarted broker takes its port back at once.
        socket.set_reuseaddr(true)?;
        match socket.bind(a) {
            Ok(()) => return socket.listen(backlog),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the host has no address")
    }))
}

/// Accepts connections until shutdown, then waits for open connections to finish the
/// request they are handling.
pub async fn serve(broker: Arc<Broker>, listeners: Vec<Bound>) {
    let mut accepts = JoinSet::new();
    let mut limits = limits::by_listener(&broker.config);
    for Bound { name, socket, tls } in listeners {
        let broker = broker.clone();
        let limits = limits.remove(&name).expect("every listener has its limits");
        let name: Arc<str> = name.into();
        accepts.spawn(async move {
            let mut shutdown = broker.shutdown_signal();
            let mut spawned = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = socket.accept() => match accepted {
                        Ok((stream, peer)) => {
                            // Past a connection rate, or at a limit, this connection waits
                            // and no other is accepted meanwhile, as Kafka's acceptor blocks.
                            let mut s = tokio::select! {
                                s = async { limits.pace().await; limits.slot().await } => s,
                                _ = crate::shutdown::requested(&mut shutdown) => break,
                            };
                            let rate = broker.ip_connection_rate(peer.ip());
                            if let Err(ms) = limits.paced_by_address(peer.ip(), rate) {
                                // As Kafka: past its address's rate, the connection is
                                // closed once its throttle has passed, unread.
                                tracing::info!(peer = %peer, listener = %name, throttle_ms = ms, "refused connection: the address is over its connection_creation_rate quota");
                                spawned.spawn(async move {
                                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                                    drop(stream);
                                });
                                continue;
                            }
                            if !limits.admit(&mut s, peer.ip()) {
                                // As Kafka: the address holds its maximum already.
                                tracing::info!(peer = %peer, listener = %name, "rejected connection: the address already has the configured maximum of connections (max.connections.per.ip)");
                                continue;
                            }
                            spawned.spawn(accept(
                                broker.clone(),
                                name.clone(),
                                tls.clone(),
                                stream,
                                peer,
                                s,
                            ));
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
            drop(socket);
            while spawned.join_next().await.is_some() {}
        });
    }
    while accepts.join_next().await.is_some() {}
}

/// A new connection: the TLS handshake on a TLS listener, then its requests.
async fn accept(
    broker: Arc<Broker>,
    listener: Arc<str>,
    tls: Option<tls::Tls>,
    stream: TcpStream,
    peer: SocketAddr,
    _slot: limits::Slot,
) {
    let _open = broker.metrics.connection_opened(&listener);
    let _ = stream.set_nodelay(true);
    // A SASL listener's clients authenticate in their first requests; the others are
    // authenticated by their transport, PLAINTEXT's at once, TLS's by the handshake.
    let sasl = broker
        .config
        .sasl
        .get(&*listener)
        .map(|accepted| std::sync::Mutex::new(Session::new(accepted.clone())));
    let by_transport = sasl.is_none();
    let Some(tls) = tls else {
        if by_transport {
            broker.metrics.authenticated(&listener, true);
        }
        let (rd, wr) = stream.into_split();
        let ctx = Connection::new(listener, peer, tls::ANONYMOUS.into(), sasl);
        return connection(broker, ctx, rd, wr).await;
    };
    let mut shutdown = broker.shutdown_signal();
    let handshake = tokio::select! {
        h = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor.accept(stream)) => h,
        _ = crate::shutdown::requested(&mut shutdown) => return,
    };
    let principal = match handshake {
        Ok(Ok(stream)) => match tls.principal(stream.get_ref().1.peer_certificates()) {
            Ok(principal) => Ok((stream, principal)),
            Err(e) => Err(e.to_string()),
        },
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no handshake within {} s",
            HANDSHAKE_TIMEOUT.as_secs()
        )),
    };
    match principal {
        Ok((stream, principal)) => {
            if by_transport {
                broker.metrics.authenticated(&listener, true);
            }
            tracing::debug!(peer = %peer, listener = %listener, principal = %principal, "tls handshake done");
            let (rd, wr) = tokio::io::split(stream);
            let ctx = Connection::new(listener, peer, principal.into(), sasl);
            connection(broker, ctx, rd, wr).await
        }
        Err(e) => {
            broker.metrics.authenticated(&listener, false);
            tracing::warn!(peer = %peer, listener = %listener, error = %e, "closing connection: failed tls handshake");
        }
    }
}

/// How long after a failed authentication's answer its connection closes (Kafka's
/// `connection.failed.authentication.delay.ms` default).
const FAILED_AUTHENTICATION_DELAY: Duration = Duration::from_millis(100);

/// On a SASL listener, as Kafka's SocketServer and authenticator: a request after the
/// session's lifetime closes the connection; a SaslHandshake on an authenticated
/// connection may begin a re-authentication (KIP-368); before the client has
/// authenticated, a bare token after a v0 SaslHandshake is answered here, and any request
/// but ApiVersions, SaslHandshake and SaslAuthenticate closes the connection.
/// `None`: dispatch the frame.
fn before_authentication(broker: &Arc<Broker>, ctx: &Connection, frame: &Bytes) -> Option<Outcome> {
    let (raw, authenticated, api) = {
        let mut s = ctx.session()?;
        let key = frame.get(0..2).map(|k| i16::from_be_bytes([k[0], k[1]]));
        let api = key.map(ApiKey::try_from);
        let now = crate::clock::now_ms();
        // A SaslHandshake begins a re-authentication even after the session's end, as in
        // Kafka's Processor: a client waits for its requests in flight (a JoinGroup held
        // for the group's rebalance, say) before it sends one.
        if matches!(api, Some(Ok(ApiKey::SaslHandshake))) && s.begin_reauthentication(now) {
            tracing::debug!(peer = %ctx.peer, listener = %ctx.listener, "sasl re-authentication begins");
        } else if s.expired(now) {
            broker.metrics.session_expired(&ctx.listener);
            return Some(Outcome::Close(
                "SASL session expired: the client did not re-authenticate within \
                 connections.max.reauth.ms or its credential's lifetime"
                    .to_string(),
            ));
        }
        (s.expects_raw_token(), s.authenticated(), api)
    };
    if authenticated {
        return None;
    }
    if raw {
        return Some(match handlers::sasl::raw_token(broker, ctx, frame) {
            Some(answer) => Outcome::Respond(answer.into()),
            None => Outcome::Close("SASL authentication failed".to_string()),
        });
    }
    match api {
        Some(Ok(ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)) => None,
        other => {
            if let Some(mut s) = ctx.session() {
                broker
                    .metrics
                    .sasl_login(&ctx.listener, s.reauthenticating(), false);
                s.fail();
            }
            Some(Outcome::Close(format!(
                "request {other:?} before SASL authentication"
            )))
        }
    }
}

/// Serves a connection's requests until it closes or the broker shuts down; its store
/// reads take turns with other connections' (`log::reads`).
async fn connection<R, W>(broker: Arc<Broker>, ctx: Connection, rd: R, wr: W)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    crate::log::reads::as_one_reader(requests(broker, ctx, rd, wr)).await
}

/// A connection's response bytes not yet written to its socket.
#[derive(Default)]
struct Unsent {
    bytes: AtomicUsize,
    /// Woken whenever a response has been written, and when the writer ends.
    written: Notify,
}

impl Unsent {
    fn written(&self, n: usize) {
        self.bytes.fetch_sub(n, Ordering::AcqRel);
        self.written.notify_one();
    }

    /// Waits while more than [`RESPONSE_BYTES_UNSENT_MAX`] bytes are unsent. False when the
    /// writer has ended (`tx` closed), or when no response was written for `idle` (a client
    /// that stopped reading, closed as Kafka closes a connection idle for
    /// `connections.max.idle.ms`).
    async fn drained(&self, tx: &mpsc::Sender<Pieces>, idle: Option<Duration>) -> bool {
        if self.bytes.load(Ordering::Acquire) <= RESPONSE_BYTES_UNSENT_MAX {
            return !tx.is_closed();
        }
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            if tx.is_closed() {
                return false;
            }
            if self.bytes.load(Ordering::Acquire) <= RESPONSE_BYTES_UNSENT_MAX {
                return true;
            }
            match idle {
                Some(idle) => {
                    if tokio::time::timeout(idle, written).await.is_err() {
                        return false;
                    }
                }
                None => written.await,
            }
        }
    }
}

/// Writes a connection's responses in order until the reader is done or the socket fails.
async fn write_responses<W>(wr: &mut W, rx: &mut mpsc::Receiver<Pieces>, unsent: &Unsent)
where
    W: AsyncWrite + Unpin,
{
    while let Some(mut first) = rx.recv().await {
        // Vectored: a fetch response's record sets are pieces of their own.
        let n = first.remaining();
        if wr.write_all_buf(&mut first).await.is_err() {
            return;
        }
        unsent.written(n);
        // Drain what is already queued before the flush, so pipelined responses share it.
        while let Ok(mut more) = rx.try_recv() {
            let n = more.remaining();
            if wr.write_all_buf(&mut more).await.is_err() {
                return;
            }
            unsent.written(n);
        }
        if wr.flush().await.is_err() {
            return;
        }
    }
    let _ = wr.shutdown().await;
}

async fn requests<R, W>(broker: Arc<Broker>, ctx: Connection, rd: R, mut wr: W)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let peer = ctx.peer;
    let (tx, mut rx) = mpsc::channel::<Pieces>(RESPONSES_QUEUED_MAX);
    let unsent = Arc::new(Unsent::default());
    let writer = {
        let unsent = unsent.clone();
        tokio::spawn(async move {
            write_responses(&mut wr, &mut rx, &unsent).await;
            // The reader sees the channel closed, then wakes if it waits.
            drop(rx);
            unsent.written.notify_one();
        })
    };

    let mut frames = FrameReader::new(rd, broker.config.socket_request_bytes_max as usize);
    let mut shutdown = broker.shutdown_signal();
    // connections.max.idle.ms: no request for that long closes the connection, as Kafka's
    // selector does.
    // (never when negative).
    let idle = broker
        .config
        .connections_max_idle_ms
        .map(Duration::from_millis);
    // Set when the client stopped reading: its unsent responses are dropped, not waited for.
    let mut stalled = false;
    loop {
        let next = tokio::select! {
            f = frames.next() => f,
            _ = tokio::time::sleep(idle.unwrap_or_default()), if idle.is_some() => {
                tracing::debug!(peer = %peer, idle_ms = ?idle, "closing an idle connection (connections.max.idle.ms)");
                break;
            }
            _ = crate::shutdown::requested(&mut shutdown) => break,
        };
        let frame = match next {
            Ok(Some(f)) => f,
            Ok(None) => break,
            // A client that goes away mid-frame is no news (thousands of them may, when a
            // flood of half-sent frames ends); a bad length or a socket error is.
            Err(e @ FrameError::Truncated) => {
                tracing::debug!(peer = %peer, error = %e, "connection closed inside a frame");
                break;
            }
            Err(e) => {
                tracing::warn!(peer = %peer, error = %e, "closing connection: bad frame");
                break;
            }
        };
        let outcome = match before_authentication(&broker, &ctx, &frame) {
            Some(outcome) => outcome,
            // Boxed: the handlers' futures are large, and an idle connection (most of
            // them, with thousands open) should not hold room for one.
            None => Box::pin(dispatch::handle(&broker, &ctx, frame)).await,
        };
        match outcome {
            Outcome::Respond(bytes) => {
                unsent.bytes.fetch_add(bytes.remaining(), Ordering::AcqRel);
                // (At shutdown too: the answer to a request handled goes out, within the
                // broker's shutdown grace.)
                let sent = match idle {
                    Some(idle) => tokio::time::timeout(idle, tx.send(bytes)).await,
                    None => Ok(tx.send(bytes).await),
                };
                if !(matches!(sent, Ok(Ok(()))) && unsent.drained(&tx, idle).await) {
                    if !tx.is_closed() {
                        tracing::debug!(peer = %peer, idle_ms = ?idle, "closing a connection whose client does not read its responses (connections.max.idle.ms)");
                        stalled = true;
                    }
                    break;
                }
                if ctx.session().is_some_and(|s| s.failed()) {
                    // As Kafka's connection.failed.authentication.delay.ms: the answer
                    // goes out, then the connection closes a little later.
                    tokio::time::sleep(FAILED_AUTHENTICATION_DELAY).await;
                    break;
                }
            }
            Outcome::NoResponse => {}
            Outcome::Close(reason) => {
                tracing::warn!(peer = %peer, reason = %reason, "closing connection");
                break;
            }
        }
        if let Some(until) = ctx.take_mute() {
            // KIP-219: a throttled client's response goes out at once, then its
            // connection is not read until the throttle ends (a client that ignores
            // throttle_time_ms waits all the same).
            let left = until.saturating_sub(crate::clock::now_ms_unsigned());
            tracing::debug!(peer = %peer, throttle_ms = left, "connection muted by a client quota");
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(left)) => {}
                _ = crate::shutdown::requested(&mut shutdown) => break,
            }
        }
    }
    drop(tx);
    if stalled {
        writer.abort();
    }
    let _ = writer.await;
    // KIP-932: a share session ends with the connection it was opened on.
    broker
        .shares
        .connection_closed(&(ctx.listener.clone(), ctx.peer));
}
