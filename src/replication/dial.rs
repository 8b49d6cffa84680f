//! How this broker reaches another on the inter-broker listener, as Kafka's brokers reach
//! each other: TCP, then TLS when the listener is SSL or SASL_SSL (the listener's
//! truststore checks the other broker, its keystore answers a request for a client
//! certificate), then, when it is SASL_PLAINTEXT or SASL_SSL, a login with
//! `sasl.mechanism.inter.broker.protocol` (SaslHandshake v1, SaslAuthenticate v2) as the
//! user of the listener's login module. The other broker sees this broker's principal,
//! which the authorizer must let do CLUSTER_ACTION (a super user, as in Kafka's guides).

use std::io;
use std::sync::Arc;

use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::AsyncWriteExt;
use tokio_rustls::TlsConnector;

use crate::config::sasl::Login;
use crate::config::Config;
use crate::security::scram;
use crate::wire::{self, frame::FrameReader};

pub use crate::tls::Stream;

/// The largest answer read while logging in.
const LOGIN_ANSWER_BYTES_MAX: usize = 1 << 20;

/// This broker's way to the others, made once from its config.
pub struct Dialer {
    listener: String,
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
            tls,
            login: config.inter_broker_login.clone(),
            salted: Salted::default(),
        })
    }

    /// A connection to `addr` (`host:port` on the inter-broker listener), logged in. A
    /// failed TLS handshake or a refused login is a `PermissionDenied` error, saying why.
    pub async fn connect(&self, addr: &str) -> io::Result<Stream> {
        let mut stream = crate::tls::connect(addr, self.tls.as_ref())
            .await
            .map_err(|e| match e.kind() {
                io::ErrorKind::PermissionDenied => io::Error::new(
                    e.kind(),
                    format!("{e} (inter-broker listener {})", self.listener),
                ),
                _ => e,
            })?;
        if let Some(login) = &self.login {
            log_in(&mut stream, login, &self.salted)
                .await
                .map_err(|why| {
                    io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "logging in to {addr} on listener {} as {} with {}: {why}",
                            self.listener, login.username, login.mechanism
                        ),
                    )
                })?;
        }
        Ok(stream)
    }
}

/// SaslHandshake, then SaslAuthenticate until the mechanism is done.
async fn log_in(stream: &mut Stream, login: &Login, cache: &Salted) -> Result<(), String> {
    let handshake: SaslHandshakeResponse = exchange(
        stream,
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(wire::str_bytes(&login.mechanism)),
    )
    .await?;
    if handshake.error_code != 0 {
        return Err(format!(
            "the broker does not take {} (error {}; it takes {})",
            login.mechanism,
            handshake.error_code,
            handshake
                .mechanisms
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    match scram::Mechanism::from_name(&login.mechanism) {
        None => {
            let token = format!("\0{}\0{}", login.username, login.password);
            authenticate(stream, token.into_bytes()).await?;
        }
        Some(m) => {
            let nonce = scram::nonce();
            let mut client = scram::Client::new(m, &login.username, &login.password, &nonce);
            let server_first = authenticate(stream, client.first().into_bytes()).await?;
            let salted = |salt: &[u8], iterations: i32| {
                let mut kept = cache.lock().unwrap_or_else(|e| e.into_inner());
                match &*kept {
                    Some((s, i, p)) if s == salt && *i == iterations => p.clone(),
                    _ => {
                        let p = m.salted_password(&login.password, salt, iterations);
                        *kept = Some((salt.to_vec(), iterations, p.clone()));
                        p
                    }
                }
            };
            let last = client
                .answer_salted(&server_first, &salted)
                .map_err(|e| e.to_string())?;
            let server_final = authenticate(stream, last.into_bytes()).await?;
            client.check(&server_final).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// One SaslAuthenticate round: the server's bytes, or its refusal.
async fn authenticate(stream: &mut Stream, bytes: Vec<u8>) -> Result<bytes::Bytes, String> {
    let req = SaslAuthenticateRequest::default().with_auth_bytes(bytes.into());
    let r: SaslAuthenticateResponse = exchange(stream, ApiKey::SaslAuthenticate, 2, &req).await?;
    match r.error_code {
        0 => Ok(r.auth_bytes),
        code => Err(format!(
            "refused (error {code}): {}",
            r.error_message.as_deref().unwrap_or("")
        )),
    }
}

async fn exchange<Req: Encodable, Resp: Decodable>(
    stream: &mut Stream,
    api: ApiKey,
    version: i16,
    req: &Req,
) -> Result<Resp, String> {
    let frame =
        wire::request_frame(api, version, 0, "cairn-broker", req).map_err(|e| e.to_string())?;
    stream.write_all(&frame).await.map_err(|e| e.to_string())?;
    let answer = FrameReader::new(&mut *stream, LOGIN_ANSWER_BYTES_MAX)
        .next()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the broker closed the connection")?;
    wire::decode_response(api, version, 0, answer).map_err(|e| e.to_string())
}
