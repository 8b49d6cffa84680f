//! SaslHandshake and SaslAuthenticate, on a connection's SASL session
//! ([`crate::security::sasl::Session`]): the server lets only these and ApiVersions through
//! before a SASL listener's client has authenticated, and closes the connection once the
//! session has failed. On a listener without SASL, and on an authenticated connection that
//! is not re-authenticating (KIP-368, begun by the server when a SaslHandshake arrives),
//! both answer ILLEGAL_SASL_STATE and the connection stays open, as Kafka's KafkaApis
//! answers them.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, Connection, RequestContext};
use crate::broker::Broker;
use crate::security::sasl::{Refusal, Step};

pub async fn handshake(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: SaslHandshakeRequest,
) -> SaslHandshakeResponse {
    let illegal =
        || SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code());
    let Some(mut s) = ctx.conn.session() else {
        return illegal();
    };
    if s.authenticated() {
        return illegal();
    }
    let result = s.handshake(req.mechanism.as_str(), ctx.version);
    let response = SaslHandshakeResponse::default().with_mechanisms(
        s.mechanisms()
            .iter()
            .map(|m| str_bytes(m.as_str()))
            .collect(),
    );
    match result {
        Ok(()) => response,
        Err(refusal) => {
            refused(broker, ctx.conn, &refusal, s.reauthenticating());
            s.fail();
            response.with_error_code(refusal.code())
        }
    }
}

pub async fn authenticate(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: SaslAuthenticateRequest,
) -> SaslAuthenticateResponse {
    let illegal = |message: &str| {
        SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code())
            .with_error_message(Some(str_bytes(message)))
    };
    {
        let Some(mut s) = ctx.conn.session() else {
            return illegal("Unexpected SaslAuthenticate request");
        };
        if s.authenticated() {
            return illegal("SaslAuthenticate request received after successful authentication");
        }
        if !s.expects_authenticate() {
            s.fail();
            return illegal("Unexpected SaslAuthenticate request");
        }
    }
    match step(broker, ctx.conn, &req.auth_bytes) {
        Ok((bytes, lifetime_ms)) => SaslAuthenticateResponse::default()
            .with_auth_bytes(bytes)
            .with_session_lifetime_ms(lifetime_ms),
        Err(refusal) => SaslAuthenticateResponse::default()
            .with_error_code(refusal.code())
            .with_error_message(Some(str_bytes(refusal.message()))),
    }
}

/// A bare token after a v0 SaslHandshake: the answer, as a bare length-prefixed frame, or
/// `None` when authentication failed (the connection then closes without an answer, as
/// Kafka's does).
pub fn raw_token(broker: &Arc<Broker>, conn: &Connection, token: &[u8]) -> Option<Bytes> {
    let (bytes, _) = step(broker, conn, token).ok()?;
    let mut frame = BytesMut::with_capacity(4 + bytes.len());
    frame.put_i32(bytes.len() as i32);
    frame.put_slice(&bytes);
    Some(frame.freeze())
}

/// One token through the session: the bytes to answer and, once authenticated, the
/// session's lifetime in ms (0: none); or the refusal (counted, logged, and the session
/// failed).
fn step(broker: &Arc<Broker>, conn: &Connection, token: &[u8]) -> Result<(Bytes, i64), Refusal> {
    let Some(mut s) = conn.session() else {
        return Err(Refusal::IllegalState("no SASL on this listener".into()));
    };
    let credential = |user: &str, m: crate::security::scram::Mechanism| {
        broker.scram_credentials(user).get(m.name()).cloned()
    };
    let again = s.reauthenticating();
    match s.token(
        token,
        &credential,
        &crate::security::scram::nonce,
        crate::clock::now_ms(),
    ) {
        Ok(Step::Challenge(bytes)) => Ok((bytes.into(), 0)),
        Ok(Step::Done {
            response,
            principal,
            session_lifetime_ms,
        }) => {
            broker.metrics.sasl_login(&conn.listener, again, true);
            tracing::debug!(peer = %conn.peer, listener = %conn.listener, principal = %principal, reauthenticated = again, session_lifetime_ms, "sasl authenticated");
            Ok((response.into(), session_lifetime_ms))
        }
        Err(refusal) => {
            refused(broker, conn, &refusal, again);
            s.fail();
            Err(refusal)
        }
    }
}

/// One log line and one failed authentication (or re-authentication) per refused client.
fn refused(broker: &Arc<Broker>, conn: &Connection, refusal: &Refusal, again: bool) {
    broker.metrics.sasl_login(&conn.listener, again, false);
    tracing::warn!(peer = %conn.peer, listener = %conn.listener, refusal = ?refusal, reauthentication = again, "sasl authentication failed");
}
