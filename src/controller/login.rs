//! The SASL login that opens every connection to a SASL_PLAINTEXT or SASL_SSL controller
//! listener, before its Raft and broker RPCs: Kafka's SaslHandshake (v1) and
//! SaslAuthenticate (v0-v2) frames, answered by the same [`Session`] client listeners use,
//! which [`crate::dial::Dialer`] speaks on the other side. Only Cairn's nodes dial this
//! listener, so anything else before the login is done closes the connection. A session
//! with a lifetime (`connections.max.reauth.ms`, an OAUTHBEARER token's expiry) ends the
//! connection at its first RPC after the end; the dialer dials again before that.

use std::sync::Arc;

use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::metrics::Metrics;
use crate::security::sasl::{Accepted, Session, Step};
use crate::wire::{self, frame::FrameError, frame::FrameReader};

/// The largest login frame read: a token or a password, never near this.
const LOGIN_FRAME_BYTES_MAX: usize = 1 << 20;

/// How long a new connection may take to log in.
const LOGIN_TIME_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a connection was not admitted: said once in the log, at warn when the other side
/// was refused (not for a connection lost under the login).
#[derive(Debug)]
pub(crate) enum NotAdmitted {
    Refused(String),
    Lost(String),
}

/// Who may speak on one SASL controller listener, and where logins are counted.
pub(crate) struct Gate {
    pub listener: String,
    pub accepted: Arc<Accepted>,
    pub metrics: Arc<Metrics>,
}

impl Gate {
    /// Runs the login on a new connection: the authenticated session, or why not. A
    /// connection not logged in within `LOGIN_TIME_MAX` is refused too.
    pub(crate) async fn admit<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: &mut S,
    ) -> Result<Session, NotAdmitted> {
        let mut session = Session::new(self.accepted.clone());
        match tokio::time::timeout(LOGIN_TIME_MAX, self.log_in(stream, &mut session)).await {
            Ok(result) => result.map(|()| session),
            Err(_) => Err(self.refused(
                &mut session,
                format!("not logged in within {LOGIN_TIME_MAX:?}"),
            )),
        }
    }

    /// The login's exchange. SCRAM is never enabled here (the config refuses it), so no
    /// credentials are looked up.
    async fn log_in<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: &mut S,
        session: &mut Session,
    ) -> Result<(), NotAdmitted> {
        let (rd, mut out) = tokio::io::split(stream);
        let mut frames = FrameReader::new(rd, LOGIN_FRAME_BYTES_MAX);
        loop {
            let lost = |e: &dyn std::fmt::Display| NotAdmitted::Lost(e.to_string());
            let mut frame = match frames.next().await {
                Ok(Some(frame)) => frame,
                Ok(None) => return Err(lost(&"closed before logging in")),
                Err(e @ (FrameError::Io(_) | FrameError::Truncated)) => return Err(lost(&e)),
                Err(e) => return Err(self.refused(session, e.to_string())),
            };
            let (api, version) = match (frame.len() >= 4).then(|| {
                (
                    i16::from_be_bytes([frame[0], frame[1]]),
                    i16::from_be_bytes([frame[2], frame[3]]),
                )
            }) {
                Some((17, 1)) => (ApiKey::SaslHandshake, 1),
                Some((36, v @ 0..=2)) => (ApiKey::SaslAuthenticate, v),
                Some((key, version)) => {
                    return Err(self.refused(
                        session,
                        format!(
                            "api key {key} v{version} before logging in (only SaslHandshake v1 \
                             and SaslAuthenticate are taken)"
                        ),
                    ))
                }
                None => return Err(self.refused(session, "a frame too short".into())),
            };
            let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
                .map_err(|e| self.refused(session, format!("bad {api:?} header: {e}")))?;
            let answer = match api {
                ApiKey::SaslHandshake => {
                    let req = SaslHandshakeRequest::decode(&mut frame, version)
                        .map_err(|e| self.refused(session, format!("bad SaslHandshake: {e}")))?;
                    let result = session.handshake(req.mechanism.as_str(), version);
                    let mut r = SaslHandshakeResponse::default().with_mechanisms(
                        session
                            .mechanisms()
                            .iter()
                            .map(|m| wire::str_bytes(m.as_str()))
                            .collect(),
                    );
                    if let Err(refusal) = &result {
                        r.error_code = refusal.code();
                    }
                    self.answer(&mut out, api, version, header.correlation_id, &r)
                        .await?;
                    result
                        .map_err(|refusal| self.refused(session, refusal.message().to_string()))?;
                    continue;
                }
                _ => {
                    let req = SaslAuthenticateRequest::decode(&mut frame, version)
                        .map_err(|e| self.refused(session, format!("bad SaslAuthenticate: {e}")))?;
                    session.token(
                        &req.auth_bytes,
                        &|_, _| None,
                        &crate::security::scram::nonce,
                        crate::clock::now_ms(),
                    )
                }
            };
            let mut r = SaslAuthenticateResponse::default();
            let done = match &answer {
                Ok(Step::Challenge(bytes)) => {
                    r.auth_bytes = bytes.clone().into();
                    false
                }
                Ok(Step::Done {
                    response,
                    session_lifetime_ms,
                    ..
                }) => {
                    r.auth_bytes = response.clone().into();
                    r.session_lifetime_ms = *session_lifetime_ms;
                    true
                }
                Err(refusal) => {
                    r.error_code = refusal.code();
                    r.error_message = Some(wire::str_bytes(refusal.message()));
                    false
                }
            };
            self.answer(&mut out, api, version, header.correlation_id, &r)
                .await?;
            match answer {
                Err(refusal) => return Err(self.refused(session, refusal.message().to_string())),
                Ok(_) if done => {
                    self.metrics.sasl_login(&self.listener, false, true);
                    return Ok(());
                }
                Ok(_) => {}
            }
        }
    }

    async fn answer<W: AsyncWrite + Unpin, T: Encodable>(
        &self,
        out: &mut W,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        body: &T,
    ) -> Result<(), NotAdmitted> {
        let frame = wire::response_frame(api, version, correlation_id, body)
            .map_err(|e| NotAdmitted::Lost(e.to_string()))?;
        out.write_all(&frame)
            .await
            .map_err(|e| NotAdmitted::Lost(e.to_string()))
    }

    /// Counts a failed login and says why.
    fn refused(&self, session: &mut Session, why: String) -> NotAdmitted {
        session.fail();
        self.metrics.sasl_login(&self.listener, false, false);
        NotAdmitted::Refused(why)
    }
}
