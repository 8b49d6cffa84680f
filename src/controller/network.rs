//! Raft RPCs between controllers over TCP on the controller listener (TLS when it is SSL or
//! SASL_SSL; first a SASL login when it is SASL_PLAINTEXT or SASL_SSL, see [`super::login`]):
//! a 4-byte length and a JSON body per message, one request and its answer at a time per
//! connection, the connection kept for the next call and re-dialled after any failure and
//! before its login's session ends.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::dial::{Dialer, Stream};
use crate::security::sasl::Session;

use super::login::{Gate, NotAdmitted};
use super::raft::{NodeId, TypeConfig};
use super::rpc::{BrokerReply, BrokerRequest};
use futures_util::future::BoxFuture;

/// Larger frames are refused: a snapshot of the metadata image is the largest message.
const FRAME_BYTES_MAX: usize = 256 << 20;

/// What one controller-listener connection carries to a voter: Raft's RPCs and brokers'
/// requests.
#[derive(Serialize, Deserialize)]
pub enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    Broker(BrokerRequest),
}

/// A voter's answer to an [`Rpc`].
#[derive(Serialize, Deserialize)]
pub enum Reply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Broker(BrokerReply),
}

/// Answers brokers' requests to the controller (the active one decides, others redirect).
pub type BrokerHandler =
    Arc<dyn Fn(BrokerRequest) -> BoxFuture<'static, BrokerReply> + Send + Sync>;

pub(crate) async fn write_frame<T: Serialize>(
    s: &mut (impl AsyncWrite + Unpin),
    msg: &T,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    s.write_all(&(body.len() as u32).to_be_bytes()).await?;
    s.write_all(&body).await?;
    s.flush().await
}

/// Reads one message. Its memory grows as its bytes arrive, so a length prefix with
/// nothing behind it costs nothing.
pub async fn read_frame<T: for<'de> Deserialize<'de>>(
    s: &mut (impl AsyncRead + Unpin),
) -> std::io::Result<T> {
    let len = s.read_u32().await? as usize;
    if len > FRAME_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "raft frame of {len} bytes is over the {FRAME_BYTES_MAX} limit"
        )));
    }
    let mut body = Vec::new();
    (&mut *s).take(len as u64).read_to_end(&mut body).await?;
    if body.len() < len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

/// Dials voters by the address this node's `controller.quorum.voters` gives them (each node
/// may reach a voter its own way, as in Kafka's static quorum), else by the address in their
/// membership entry.
#[derive(Clone)]
pub struct Network {
    pub addrs: BTreeMap<NodeId, String>,
    /// The controller listener's client side.
    pub dial: Arc<Dialer>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            addr: self
                .addrs
                .get(&target)
                .cloned()
                .unwrap_or_else(|| node.addr.clone()),
            dial: self.dial.clone(),
            conn: None,
        }
    }
}

pub struct Peer {
    target: NodeId,
    addr: String,
    dial: Arc<Dialer>,
    /// The open connection, and when its login's session is near its end.
    conn: Option<(Stream, Option<Instant>)>,
}

/// Why a call did not get an answer.
enum CallError {
    Unreachable(std::io::Error),
    Network(std::io::Error),
}

impl Peer {
    async fn call(&mut self, rpc: &Rpc, ttl: Duration) -> Result<Reply, CallError> {
        let result = tokio::time::timeout(ttl, async {
            // A session about to end is not used: the other side would close it.
            if let Some((_, Some(end))) = &self.conn {
                if Instant::now() >= *end {
                    self.conn = None;
                }
            }
            if self.conn.is_none() {
                let c = self.dial.connect_for_long(&self.addr).await.map_err(|e| {
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        tracing::warn!(voter = self.target, error = %e, "cannot reach a voter");
                    }
                    CallError::Unreachable(e)
                })?;
                self.conn = Some(c);
            }
            let (s, _) = self.conn.as_mut().expect("connected above");
            write_frame(s, rpc).await.map_err(CallError::Network)?;
            read_frame(s).await.map_err(CallError::Network)
        })
        .await
        .unwrap_or_else(|_| {
            Err(CallError::Network(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from {} within {ttl:?}", self.addr),
            )))
        });
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    /// A peer that is down or whose connection broke is Unreachable, which openraft retries
    /// with a backoff; other failures (a timeout, a bad frame) are network errors.
    fn rpc_error<E: std::error::Error>(&self, e: CallError) -> RPCError<NodeId, BasicNode, E> {
        use std::io::ErrorKind::*;
        match e {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Network(e)
                if matches!(
                    e.kind(),
                    UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
                ) =>
            {
                RPCError::Unreachable(Unreachable::new(&e))
            }
            CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }

    fn remote<E: std::error::Error>(&self, e: E) -> RPCError<NodeId, BasicNode, E> {
        RPCError::RemoteError(RemoteError::new(self.target, e))
    }

    fn mismatch<E: std::error::Error>(&self) -> RPCError<NodeId, BasicNode, E> {
        let e = std::io::Error::other("answer does not match the request");
        RPCError::Network(NetworkError::new(&e))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(&Rpc::Append(rpc), option.hard_ttl()).await {
            Ok(Reply::Append(r)) => r.map_err(|e| self.remote(e)),
            Ok(_) => Err(self.mismatch()),
            Err(e) => Err(self.rpc_error(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self.call(&Rpc::Snapshot(rpc), option.hard_ttl()).await {
            Ok(Reply::Snapshot(r)) => r.map_err(|e| self.remote(e)),
            Ok(_) => Err(self.mismatch()),
            Err(e) => Err(self.rpc_error(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(&Rpc::Vote(rpc), option.hard_ttl()).await {
            Ok(Reply::Vote(r)) => r.map_err(|e| self.remote(e)),
            Ok(_) => Err(self.mismatch()),
            Err(e) => Err(self.rpc_error(e)),
        }
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

/// Answers Raft RPCs from other voters, and brokers' requests with `brokers` (refused when
/// absent), until `stop` turns true; over TLS with `tls`, and after a SASL login with
/// `gate`, where a failed handshake or login closes that connection only.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    gate: Option<Arc<Gate>>,
    raft: Raft<TypeConfig>,
    brokers: Option<BrokerHandler>,
    mut stop: watch::Receiver<bool>,
) {
    let raft = Arc::new(raft);
    loop {
        let (stream, peer) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "controller listener accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => return,
        };
        let raft = raft.clone();
        let stop = stop.clone();
        let brokers = brokers.clone();
        let tls = tls.clone();
        let gate = gate.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let mut stream: Stream = match tls {
                None => Box::new(stream),
                Some(tls) => {
                    let handshake = tls.accept(stream);
                    match tokio::time::timeout(Duration::from_secs(10), handshake).await {
                        Ok(Ok(s)) => Box::new(s),
                        // A peer gone mid-handshake (a restarting or cut-off voter) is
                        // routine; anything else, a refused certificate say, is not.
                        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                            tracing::debug!(peer = %peer, error = %e, "controller listener: tls handshake cut short");
                            return;
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(peer = %peer, error = %e, "controller listener: failed tls handshake");
                            return;
                        }
                        Err(_) => {
                            tracing::warn!(peer = %peer, "controller listener: no tls handshake in 10 s");
                            return;
                        }
                    }
                }
            };
            let session = match &gate {
                None => None,
                Some(gate) => match gate.admit(&mut stream).await {
                    Ok(session) => Some((session, gate)),
                    Err(NotAdmitted::Refused(why)) => {
                        tracing::warn!(peer = %peer, listener = %gate.listener, why, "controller listener: login refused");
                        return;
                    }
                    Err(NotAdmitted::Lost(why)) => {
                        tracing::debug!(peer = %peer, why, "controller listener: connection lost while logging in");
                        return;
                    }
                },
            };
            if let Err(e) = connection(stream, session, &raft, brokers, stop).await {
                tracing::debug!(peer = %peer, error = %e, "controller connection closed");
            }
        });
    }
}

/// One connection's RPCs, after its login's `session` when there is one: the first RPC
/// after the session's end closes the connection, as Kafka closes a client's.
async fn connection(
    mut s: Stream,
    session: Option<(Session, &Arc<Gate>)>,
    raft: &Raft<TypeConfig>,
    brokers: Option<BrokerHandler>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    loop {
        let rpc: Rpc = tokio::select! {
            r = read_frame(&mut s) => r?,
            _ = stopped(&mut stop) => return Ok(()),
        };
        if let Some((session, gate)) = &session {
            if session.expired(crate::clock::now_ms()) {
                gate.metrics.session_expired(&gate.listener);
                return Err(std::io::Error::other("the login's session ended"));
            }
        }
        let reply = match rpc {
            Rpc::Append(r) => Reply::Append(raft.append_entries(r).await),
            Rpc::Vote(r) => Reply::Vote(raft.vote(r).await),
            Rpc::Snapshot(r) => Reply::Snapshot(raft.install_snapshot(r).await),
            Rpc::Broker(r) => Reply::Broker(match &brokers {
                Some(handle) => handle(r).await,
                None => BrokerReply::NotController { leader: None },
            }),
        };
        write_frame(&mut s, &reply).await?;
    }
}

/// Where a voter listens, as its membership entry names it.
pub fn node(addr: SocketAddr) -> BasicNode {
    BasicNode {
        addr: addr.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length prefix is not memory until its bytes arrive: a frame claiming 200 MiB with
    /// a few bytes behind it ends as a cut-short frame, and one over the limit is refused.
    #[tokio::test]
    async fn frames_are_read_as_their_bytes_arrive() {
        let mut cut_short: Vec<u8> = (200u32 << 20).to_be_bytes().to_vec();
        cut_short.extend_from_slice(b"{\"Vote\"");
        let e = read_frame::<Rpc>(&mut cut_short.as_slice())
            .await
            .err()
            .unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        let too_long = (FRAME_BYTES_MAX as u32 + 1).to_be_bytes();
        assert!(read_frame::<Rpc>(&mut too_long.as_slice()).await.is_err());
        let mut reply = Vec::new();
        write_frame(
            &mut reply,
            &Reply::Broker(BrokerReply::NotController { leader: None }),
        )
        .await
        .unwrap();
        let back: Reply = read_frame(&mut reply.as_slice()).await.unwrap();
        assert!(matches!(
            back,
            Reply::Broker(BrokerReply::NotController { leader: None })
        ));
    }
}
