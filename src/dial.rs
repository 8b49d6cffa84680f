//! How a node reaches another's listener, as Kafka's nodes reach each other: TCP, then TLS
//! when the listener is SSL or SASL_SSL (the listener's truststore checks the other node,
//! its keystore answers a request for a client certificate), then, when it is
//! SASL_PLAINTEXT or SASL_SSL, a login (SaslHandshake v1, SaslAuthenticate v2) as the user
//! of the listener's login module (for OAUTHBEARER, a fresh unsecured token per login).
//! Brokers dial each other on the inter-broker listener with
//! `sasl.mechanism.inter.broker.protocol`; the other broker sees this broker's principal,
//! which the authorizer must let do CLUSTER_ACTION (a super user, as in Kafka's guides).
//! Voters, and brokers asking the active controller, dial the controller listener with
//! `sasl.mechanism.controller.protocol`.
//! When the other node gives the session a lifetime (`connections.max.reauth.ms`,
//! KIP-368), a connection kept open (a follower's fetcher) logs in again on the same
//! connection before it ends, as Kafka's brokers do.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use crate::config::sasl::{Login, Secret};
use crate::config::Config;
use crate::security::scram;
use crate::wire::{self, frame::FrameReader};

pub use crate::tls::Stream;

/// The largest answer read while logging in.
const LOGIN_ANSWER_BYTES_MAX: usize = 1 << 20;

/// This node's way to one listener of the others, made once from its config.
pub struct Dialer {
    listener: String,
    /// What the listener is to this node, for messages: "inter-broker listener".
    role: &'static str,
    tls: Option<TlsConnector>,
    login: Option<Login>,
    /// SCRAM's salted password for the last (salt, iterations) the others sent: PBKDF2
    /// costs milliseconds, and peer calls dial once per call.
    salted: Salted,
}

type Salted = std::sync::Mutex<Option<(Vec<u8>, i32, Vec<u8>)>>;

impl Dialer {
    /// The dialer of the inter-broker listener; a truststore that cannot be read fails
    /// start-up, naming its key.
    pub fn new(config: &Config) -> anyhow::Result<Dialer> {
        let listener = config.inter_broker_listener().to_string();
        let tls = match config.ssl.get(&listener) {
            Some(s) => Some(TlsConnector::from(Arc::new(crate::tls::client_config(
                &listener, s,
            )?))),
            None => None,
        };
        Ok(Dialer {
            listener,
            role: "inter-broker listener",
            tls,
            login: config.inter_broker_login.clone(),
            salted: Salted::default(),
        })
    }

    /// The dialer of the controller listener, whose client side is `tls` when it speaks
    /// TLS ([`crate::tls::Mutual::load`] read its stores); none in a quorum of one.
    pub fn controller(config: &Config, tls: Option<TlsConnector>) -> Dialer {
        Dialer {
            listener: config
                .cluster
                .controller_listeners
                .first()
                .map(|l| l.name.clone())
                .unwrap_or_default(),
            role: "controller listener",
            tls,
            login: config.controller_sasl.as_ref().map(|s| s.login.clone()),
            salted: Salted::default(),
        }
    }

    /// A connection to `addr` (`host:port` on the listener), logged in. A
    /// TLS handshake or a login the other node refuses is a `PermissionDenied` error,
    /// saying why; a connection lost under either keeps an error of its own kind.
    pub async fn connect(&self, addr: &str) -> io::Result<Stream> {
        self.connect_for_long(addr).await.map(|(stream, _)| stream)
    }

    /// As `connect`, for a connection kept open: also when to log in again
    /// (`log_in_again`), if the other broker gave the session a lifetime.
    pub async fn connect_for_long(&self, addr: &str) -> io::Result<(Stream, Option<Instant>)> {
        let mut stream = crate::tls::connect(addr, self.tls.as_ref())
            .await
            .map_err(|e| match e.kind() {
                io::ErrorKind::PermissionDenied => {
                    io::Error::new(e.kind(), format!("{e} ({} {})", self.role, self.listener))
                }
                _ => e,
            })?;
        let (rd, mut out) = tokio::io::split(&mut stream);
        let mut frames = FrameReader::new(rd, LOGIN_ANSWER_BYTES_MAX);
        let again = self.log_in_again(addr, &mut frames, &mut out).await?;
        Ok((stream, again))
    }

    /// Logs in over a connection's frames and writer: at its start, and again before the
    /// session the other broker granted ends (a SaslHandshake then begins a
    /// re-authentication there). Returns when to log in again: at 90% of the session's
    /// lifetime, as Kafka's clients do between 85% and 95%. No login configured: `None`.
    pub async fn log_in_again<R, W>(
        &self,
        addr: &str,
        frames: &mut FrameReader<R>,
        out: &mut W,
    ) -> io::Result<Option<Instant>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let Some(login) = &self.login else {
            return Ok(None);
        };
        let lifetime_ms = log_in(frames, out, login, &self.salted)
            .await
            .map_err(|failed| {
                let (kind, why) = match failed {
                    Failed::Refused(why) => (io::ErrorKind::PermissionDenied, why),
                    Failed::Network(why) => (io::ErrorKind::ConnectionAborted, why),
                };
                io::Error::new(
                    kind,
                    format!(
                        "logging in to {addr} on listener {} as {} with {}: {why}",
                        self.listener, login.username, login.mechanism
                    ),
                )
            })?;
        Ok((lifetime_ms > 0)
            .then(|| Instant::now() + Duration::from_millis(lifetime_ms as u64 * 9 / 10)))
    }
}

/// Why a login failed: the other broker refused it, or the connection failed under it
/// (a restart, a cut link), which is not worth a warning.
enum Failed {
    Refused(String),
    Network(String),
}

impl From<String> for Failed {
    fn from(why: String) -> Failed {
        Failed::Refused(why)
    }
}

/// SaslHandshake, then SaslAuthenticate until the mechanism is done: the session's
/// lifetime in ms (0: none).
async fn log_in<R, W>(
    frames: &mut FrameReader<R>,
    out: &mut W,
    login: &Login,
    cache: &Salted,
) -> Result<i64, Failed>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let handshake: SaslHandshakeResponse = exchange(
        frames,
        out,
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(wire::str_bytes(&login.mechanism)),
    )
    .await?;
    if handshake.error_code != 0 {
        return Err(Failed::Refused(format!(
            "the broker does not take {} (error {}; it takes {})",
            login.mechanism,
            handshake.error_code,
            handshake
                .mechanisms
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(",")
        )));
    }
    let password = match &login.secret {
        Secret::Password(password) => password,
        Secret::UnsecuredToken(token) => {
            let first = token.client_first(crate::clock::now_ms());
            let done = authenticate(frames, out, first).await?;
            if !done.auth_bytes.is_empty() {
                // An error challenge (RFC 7628): refused. The other broker closes the
                // connection; it is not used again.
                return Err(Failed::Refused(format!(
                    "token refused: {}",
                    String::from_utf8_lossy(&done.auth_bytes)
                )));
            }
            return Ok(done.session_lifetime_ms);
        }
    };
    let done = match scram::Mechanism::from_name(&login.mechanism) {
        None => {
            let token = format!("\0{}\0{}", login.username, password);
            authenticate(frames, out, token.into_bytes()).await?
        }
        Some(m) => {
            let nonce = scram::nonce();
            let mut client = scram::Client::new(m, &login.username, password, &nonce);
            let server_first = authenticate(frames, out, client.first().into_bytes()).await?;
            let salted = |salt: &[u8], iterations: i32| {
                let mut kept = cache.lock().unwrap_or_else(|e| e.into_inner());
                match &*kept {
                    Some((s, i, p)) if s == salt && *i == iterations => p.clone(),
                    _ => {
                        let p = m.salted_password(password, salt, iterations);
                        *kept = Some((salt.to_vec(), iterations, p.clone()));
                        p
                    }
                }
            };
            let last = client
                .answer_salted(&server_first.auth_bytes, &salted)
                .map_err(|e| e.to_string())?;
            let server_final = authenticate(frames, out, last.into_bytes()).await?;
            client
                .check(&server_final.auth_bytes)
                .map_err(|e| e.to_string())?;
            server_final
        }
    };
    Ok(done.session_lifetime_ms)
}

/// One SaslAuthenticate round: the server's answer, or its refusal.
async fn authenticate<R, W>(
    frames: &mut FrameReader<R>,
    out: &mut W,
    bytes: Vec<u8>,
) -> Result<SaslAuthenticateResponse, Failed>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let req = SaslAuthenticateRequest::default().with_auth_bytes(bytes.into());
    let r: SaslAuthenticateResponse =
        exchange(frames, out, ApiKey::SaslAuthenticate, 2, &req).await?;
    match r.error_code {
        0 => Ok(r),
        code => Err(Failed::Refused(format!(
            "refused (error {code}): {}",
            r.error_message.as_deref().unwrap_or("")
        ))),
    }
}

async fn exchange<R, W, Req: Encodable, Resp: Decodable>(
    frames: &mut FrameReader<R>,
    out: &mut W,
    api: ApiKey,
    version: i16,
    req: &Req,
) -> Result<Resp, Failed>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let frame =
        wire::request_frame(api, version, 0, "cairn-broker", req).map_err(|e| e.to_string())?;
    let network = |e: &dyn std::fmt::Display| Failed::Network(e.to_string());
    out.write_all(&frame).await.map_err(|e| network(&e))?;
    let answer = frames
        .next()
        .await
        .map_err(|e| network(&e))?
        .ok_or_else(|| network(&"the broker closed the connection"))?;
    Ok(wire::decode_response(api, version, 0, answer).map_err(|e| e.to_string())?)
}
