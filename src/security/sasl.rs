//! One connection's SASL authentication as Kafka's SaslServerAuthenticator runs it:
//! ApiVersions and SaslHandshake first, then the mechanism's tokens, in SaslAuthenticate
//! requests (handshake v1) or raw (v0). PLAIN checks `user_<name>` entries of the
//! listener's JAAS config; SCRAM-SHA-256/512 check the credentials in the cluster metadata;
//! OAUTHBEARER checks an unsecured JWS ([`super::oauthbearer`]).
//! Any failure fails the whole authentication: the client learns only that it failed.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::oauthbearer::{self, Validator};
use super::scram::{self, ClientFirst, Credential, Mechanism as Scram};

/// What a SASL listener accepts.
#[derive(Debug, Clone, Default)]
pub struct Accepted {
    /// `sasl.enabled.mechanisms`, by their SASL names, in the configured order.
    pub mechanisms: Vec<String>,
    /// PLAIN's users and passwords (`user_<name>="..."` in the JAAS config).
    pub plain_users: BTreeMap<String, String>,
    /// How OAUTHBEARER tokens are checked (the unsecured validator's options).
    pub oauthbearer: Validator,
    /// `connections.max.reauth.ms` by mechanism, where positive: the longest a session
    /// lives before the client must re-authenticate (KIP-368).
    pub max_reauth_ms: BTreeMap<String, i64>,
}

/// Where a connection is in its authentication.
#[derive(Debug)]
enum Stage {
    /// Only ApiVersions and SaslHandshake are accepted.
    Start,
    /// The mechanism is chosen; `raw` after a v0 handshake.
    Chosen {
        mechanism: String,
        raw: bool,
    },
    /// SCRAM's server-first was sent.
    ScramFirst {
        mechanism: Scram,
        client: ClientFirst,
        server_first: String,
        credential: Credential,
        raw: bool,
    },
    /// OAUTHBEARER's error challenge was sent; the client's `\x01` ends the exchange.
    OauthRefused {
        reason: String,
        raw: bool,
    },
    Authenticated,
    Failed,
}

/// A connection's SASL state.
#[derive(Debug)]
pub struct Session {
    accepted: Arc<Accepted>,
    stage: Stage,
    principal: Option<String>,
    /// The mechanism chosen at the handshake; a re-authentication must keep it.
    mechanism: Option<String>,
    /// When the authenticated session ends (ms since the epoch): the credential's expiry
    /// or `connections.max.reauth.ms` after authentication, whichever is first. A request
    /// after it closes the connection; a SaslHandshake before it re-authenticates.
    expires_ms: Option<i64>,
    /// A re-authentication is under way: the principal must come out unchanged.
    reauthenticating: bool,
    /// When the last re-authentication began: the next may begin a second later.
    last_reauth_ms: Option<i64>,
}

/// The least time between two re-authentications of a connection, as in Kafka.
const REAUTH_INTERVAL_MIN_MS: i64 = 1_000;

/// Why a handshake or token was refused; the message is for the broker's log and, where
/// Kafka sends one, the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// UNSUPPORTED_SASL_MECHANISM (33).
    UnsupportedMechanism(String),
    /// ILLEGAL_SASL_STATE (34).
    IllegalState(String),
    /// SASL_AUTHENTICATION_FAILED (58).
    Failed(String),
}

impl Refusal {
    /// Kafka's error code for it.
    pub fn code(&self) -> i16 {
        use kafka_protocol::ResponseError;
        match self {
            Refusal::UnsupportedMechanism(_) => ResponseError::UnsupportedSaslMechanism.code(),
            Refusal::IllegalState(_) => ResponseError::IllegalSaslState.code(),
            Refusal::Failed(_) => ResponseError::SaslAuthenticationFailed.code(),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Refusal::UnsupportedMechanism(m) | Refusal::IllegalState(m) | Refusal::Failed(m) => m,
        }
    }
}

/// What an accepted token leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes and wait for the next token.
    Challenge(Vec<u8>),
    /// Authenticated as `principal`; send these bytes (possibly empty), and the session's
    /// lifetime in ms (0: none), which tells the client when to re-authenticate.
    Done {
        response: Vec<u8>,
        principal: String,
        session_lifetime_ms: i64,
    },
}

impl Session {
    pub fn new(accepted: Arc<Accepted>) -> Session {
        Session {
            accepted,
            stage: Stage::Start,
            principal: None,
            mechanism: None,
            expires_ms: None,
            reauthenticating: false,
            last_reauth_ms: None,
        }
    }

    /// The enabled mechanisms, as SaslHandshake lists them.
    pub fn mechanisms(&self) -> &[String] {
        &self.accepted.mechanisms
    }

    pub fn authenticated(&self) -> bool {
        matches!(self.stage, Stage::Authenticated)
    }

    /// After a v0 handshake, the next frames are bare tokens, not requests.
    pub fn expects_raw_token(&self) -> bool {
        matches!(
            self.stage,
            Stage::Chosen { raw: true, .. }
                | Stage::ScramFirst { raw: true, .. }
                | Stage::OauthRefused { raw: true, .. }
        )
    }

    /// Whether a SaslAuthenticate request is expected now.
    pub fn expects_authenticate(&self) -> bool {
        matches!(
            self.stage,
            Stage::Chosen { raw: false, .. }
                | Stage::ScramFirst { raw: false, .. }
                | Stage::OauthRefused { raw: false, .. }
        )
    }

    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// Whether authentication failed: the connection is closed.
    pub fn failed(&self) -> bool {
        matches!(self.stage, Stage::Failed)
    }

    /// Marks authentication failed (an out-of-order request, say).
    pub fn fail(&mut self) {
        self.stage = Stage::Failed;
    }

    /// Whether an authenticated session has outlived its lifetime: its connection closes
    /// at its next request, as Kafka's does.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.authenticated() && self.expires_ms.is_some_and(|end| now_ms > end)
    }

    /// A SaslHandshake on an authenticated connection: begins a re-authentication
    /// (KIP-368) when the session has a lifetime and the previous one began at least a
    /// second ago, as Kafka's `maybeBeginServerReauthentication`. False: the handshake is
    /// an ordinary request, answered ILLEGAL_SASL_STATE.
    pub fn begin_reauthentication(&mut self, now_ms: i64) -> bool {
        if !self.authenticated() || self.expires_ms.is_none() {
            return false;
        }
        if self
            .last_reauth_ms
            .is_some_and(|t| now_ms - t < REAUTH_INTERVAL_MIN_MS)
        {
            return false;
        }
        self.last_reauth_ms = Some(now_ms);
        self.reauthenticating = true;
        self.expires_ms = None;
        self.stage = Stage::Start;
        true
    }

    /// Whether a re-authentication is under way (a failure then counts as a failed
    /// re-authentication).
    pub fn reauthenticating(&self) -> bool {
        self.reauthenticating
    }

    /// SaslHandshake: chooses `mechanism` (v0: raw tokens follow).
    pub fn handshake(&mut self, mechanism: &str, version: i16) -> Result<(), Refusal> {
        if !matches!(self.stage, Stage::Start) {
            return Err(Refusal::IllegalState(
                "Unexpected SaslHandshake request".to_string(),
            ));
        }
        if !self.accepted.mechanisms.iter().any(|m| m == mechanism) {
            self.stage = Stage::Failed;
            return Err(Refusal::UnsupportedMechanism(format!(
                "Unsupported SASL mechanism {mechanism}"
            )));
        }
        if self.reauthenticating {
            let previous = self.mechanism.clone().unwrap_or_default();
            if previous != mechanism {
                self.stage = Stage::Failed;
                return Err(Refusal::UnsupportedMechanism(format!(
                    "SASL mechanism '{mechanism}' requested by client is not supported for \
                     re-authentication of mechanism '{previous}'"
                )));
            }
        }
        self.mechanism = Some(mechanism.to_string());
        self.stage = Stage::Chosen {
            mechanism: mechanism.to_string(),
            raw: version == 0,
        };
        Ok(())
    }

    /// The next token of the chosen mechanism. `credential` finds a user's SCRAM
    /// credential; `nonce` makes SCRAM's server nonce; `now_ms` is the clock OAUTHBEARER
    /// tokens are checked against.
    pub fn token(
        &mut self,
        token: &[u8],
        credential: &dyn Fn(&str, Scram) -> Option<Credential>,
        nonce: &dyn Fn() -> String,
        now_ms: i64,
    ) -> Result<Step, Refusal> {
        let stage = std::mem::replace(&mut self.stage, Stage::Failed);
        // When the credential itself expires (an OAUTHBEARER token's `exp`).
        let mut credential_expires_ms = None;
        let mut step = match stage {
            Stage::Chosen { mechanism, raw } => match mechanism.as_str() {
                "PLAIN" => self.plain(token),
                "OAUTHBEARER" => {
                    let (authzid, jws) =
                        oauthbearer::parse_client_first(token).map_err(Refusal::Failed)?;
                    match oauthbearer::validate(&self.accepted.oauthbearer, &jws, now_ms) {
                        Ok(t) if authzid.as_ref().is_some_and(|a| *a != t.name) => {
                            Err(Refusal::Failed(format!(
                                "Authentication failed: Client requested an authorization id \
                                 ({}) that is different from the token's principal name ({})",
                                authzid.unwrap_or_default(),
                                t.name
                            )))
                        }
                        Ok(t) => {
                            credential_expires_ms = Some(t.expires_ms);
                            Ok(done(Vec::new(), &t.name))
                        }
                        // As Kafka: an error challenge, then the client's \x01, then failure.
                        Err(invalid) => {
                            self.stage = Stage::OauthRefused {
                                reason: invalid.reason.clone(),
                                raw,
                            };
                            return Ok(Step::Challenge(invalid.challenge()));
                        }
                    }
                }
                name => {
                    let m = Scram::from_name(name).ok_or_else(|| {
                        Refusal::UnsupportedMechanism(format!("Unsupported SASL mechanism {name}"))
                    })?;
                    let client = scram::parse_client_first(token).map_err(failed)?;
                    let credential =
                        credential(&client.username, m).ok_or_else(|| invalid_credentials(name))?;
                    let server_first = scram::server_first(&client, &credential, &nonce());
                    self.stage = Stage::ScramFirst {
                        mechanism: m,
                        client,
                        server_first: server_first.clone(),
                        credential,
                        raw,
                    };
                    return Ok(Step::Challenge(server_first.into_bytes()));
                }
            },
            Stage::ScramFirst {
                mechanism,
                client,
                server_first,
                credential,
                ..
            } => {
                let server_final = scram::verify_client_final(
                    mechanism,
                    &client,
                    &server_first,
                    &credential,
                    token,
                )
                .map_err(|e| {
                    // The client learns only that it failed, as from Kafka.
                    tracing::debug!(user = %client.username, error = %e, "scram client-final refused");
                    invalid_credentials(mechanism.name())
                })?;
                Ok(done(server_final.into_bytes(), &client.username))
            }
            Stage::OauthRefused { reason, .. } => {
                Err(Refusal::Failed(format!("Authentication failed: {reason}")))
            }
            Stage::Start | Stage::Authenticated | Stage::Failed => {
                return Err(Refusal::IllegalState(
                    "Unexpected SaslAuthenticate request".to_string(),
                ))
            }
        }?;
        if let Step::Done {
            principal,
            session_lifetime_ms,
            ..
        } = &mut step
        {
            if self.reauthenticating && self.principal.as_ref() != Some(principal) {
                // Kafka's words, with its `Type.name` spelling of principals.
                let dotted = |p: &str| p.replacen(':', ".", 1);
                return Err(Refusal::Failed(format!(
                    "Cannot change principals during re-authentication from {}: {}",
                    dotted(self.principal.as_deref().unwrap_or_default()),
                    dotted(principal)
                )));
            }
            let mechanism = self.mechanism.as_deref().unwrap_or_default();
            let lifetime = match (
                credential_expires_ms,
                self.accepted.max_reauth_ms.get(mechanism),
            ) {
                (None, None) => None,
                (None, Some(&max)) => Some(max),
                (Some(end), None) => Some((end - now_ms).max(0)),
                (Some(end), Some(&max)) => Some((end - now_ms).min(max).max(0)),
            };
            *session_lifetime_ms = lifetime.unwrap_or(0);
            self.expires_ms = lifetime.map(|l| now_ms.saturating_add(l));
            self.principal = Some(principal.clone());
            self.reauthenticating = false;
            self.stage = Stage::Authenticated;
        }
        Ok(step)
    }

    /// PLAIN's one token, `authzid NUL user NUL password` (authzid empty or the user).
    fn plain(&self, token: &[u8]) -> Result<Step, Refusal> {
        let bad = || Refusal::Failed("Invalid username or password".to_string());
        let text = std::str::from_utf8(token).map_err(|_| bad())?;
        let mut parts = text.split('\0');
        let (Some(authzid), Some(user), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refusal::Failed(
                "Invalid SASL/PLAIN response: expected 3 tokens".to_string(),
            ));
        };
        if user.is_empty() {
            return Err(Refusal::Failed(
                "Authentication failed: username not specified".to_string(),
            ));
        }
        if !authzid.is_empty() && authzid != user {
            return Err(Refusal::Failed(
                "Authentication failed: Client requested an authorization id that is different from username".to_string(),
            ));
        }
        match self.accepted.plain_users.get(user) {
            Some(expected) if scram::constant_time_eq(expected.as_bytes(), password.as_bytes()) => {
                Ok(done(Vec::new(), user))
            }
            _ => Err(bad()),
        }
    }
}

/// A finished exchange for user `name`; its lifetime is set by [`Session::token`].
fn done(response: Vec<u8>, name: &str) -> Step {
    Step::Done {
        response,
        principal: format!("User:{name}"),
        session_lifetime_ms: 0,
    }
}

/// Kafka's one answer to a SCRAM login that fails, whatever the reason.
fn invalid_credentials(mechanism: &str) -> Refusal {
    Refusal::Failed(format!(
        "Authentication failed during authentication due to invalid credentials with SASL \
         mechanism {mechanism}"
    ))
}

fn failed(e: scram::ScramError) -> Refusal {
    Refusal::Failed(format!("Authentication failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session::new(Arc::new(Accepted {
            mechanisms: vec!["PLAIN".into(), "SCRAM-SHA-256".into()],
            plain_users: BTreeMap::from([("alice".into(), "alice-secret".into())]),
            oauthbearer: Validator::default(),
            max_reauth_ms: BTreeMap::new(),
        }))
    }

    fn none(_: &str, _: Scram) -> Option<Credential> {
        None
    }

    #[test]
    fn plain_accepts_the_jaas_users_only() {
        let nonce = || "n".to_string();
        let mut s = session();
        assert!(s.handshake("GSSAPI", 1).is_err());
        let mut s = session();
        s.handshake("PLAIN", 1).unwrap();
        assert!(s.expects_authenticate());
        let done = s.token(b"\0alice\0alice-secret", &none, &nonce, 0).unwrap();
        assert!(matches!(done, Step::Done { principal, .. } if principal == "User:alice"));
        assert!(s.authenticated());
        for bad in [
            &b"\0alice\0wrong"[..],
            b"\0bob\0alice-secret",
            b"mallory\0alice\0alice-secret",
            b"\0alice",
            b"",
            b"\0\0x",
        ] {
            let mut s = session();
            s.handshake("PLAIN", 0).unwrap();
            assert!(s.expects_raw_token());
            assert!(matches!(
                s.token(bad, &none, &nonce, 0),
                Err(Refusal::Failed(_))
            ));
            assert!(!s.authenticated());
        }
        // A token before any handshake, a second handshake: illegal state.
        let mut s = session();
        assert!(matches!(
            s.token(b"x", &none, &nonce, 0),
            Err(Refusal::IllegalState(_))
        ));
        let mut s = session();
        s.handshake("PLAIN", 1).unwrap();
        assert!(matches!(
            s.handshake("PLAIN", 1),
            Err(Refusal::IllegalState(_))
        ));
    }

    #[test]
    fn oauthbearer_accepts_valid_unsecured_tokens_and_refuses_others_after_a_challenge() {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jws = |claims: &str| format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(claims));
        let first = |t: &str| format!("n,,\u{1}auth=Bearer {t}\u{1}\u{1}").into_bytes();
        let nonce = || "n".to_string();
        let oauth = || {
            Session::new(Arc::new(Accepted {
                mechanisms: vec!["OAUTHBEARER".into()],
                plain_users: BTreeMap::new(),
                oauthbearer: Validator::default(),
                max_reauth_ms: BTreeMap::new(),
            }))
        };
        let now = 1_700_000_000_000;
        let mut s = oauth();
        s.handshake("OAUTHBEARER", 1).unwrap();
        let good = first(&jws(r#"{"sub":"alice","exp":1700000060}"#));
        let done = s.token(&good, &none, &nonce, now).unwrap();
        assert!(matches!(done, Step::Done { principal, .. } if principal == "User:alice"));
        // An expired token: the error challenge, then the client's \x01 fails it.
        let mut s = oauth();
        s.handshake("OAUTHBEARER", 0).unwrap();
        let expired = first(&jws(r#"{"sub":"alice","exp":1600000000}"#));
        let challenge = s.token(&expired, &none, &nonce, now).unwrap();
        assert_eq!(
            challenge,
            Step::Challenge(br#"{"status":"invalid_token"}"#.to_vec())
        );
        assert!(s.expects_raw_token());
        assert!(matches!(
            s.token(b"\x01", &none, &nonce, now),
            Err(Refusal::Failed(m)) if m.contains("expired")
        ));
        assert!(!s.authenticated());
        // Garbage fails at once.
        let mut s = oauth();
        s.handshake("OAUTHBEARER", 1).unwrap();
        assert!(matches!(
            s.token(b"garbage", &none, &nonce, now),
            Err(Refusal::Failed(_))
        ));
    }

    fn with_reauth(max_ms: &[(&str, i64)]) -> Session {
        Session::new(Arc::new(Accepted {
            mechanisms: vec!["PLAIN".into(), "OAUTHBEARER".into()],
            plain_users: BTreeMap::from([
                ("alice".into(), "alice-secret".into()),
                ("bob".into(), "bob-secret".into()),
            ]),
            oauthbearer: Validator::default(),
            max_reauth_ms: max_ms.iter().map(|(m, ms)| (m.to_string(), *ms)).collect(),
        }))
    }

    fn lifetime(step: Step) -> i64 {
        match step {
            Step::Done {
                session_lifetime_ms,
                ..
            } => session_lifetime_ms,
            other => panic!("not done: {other:?}"),
        }
    }

    #[test]
    fn a_session_lives_connections_max_reauth_ms_or_until_its_token_expires() {
        let nonce = || "n".to_string();
        let now = 1_700_000_000_000;
        // No lifetime: 0 to the client, never expires, no re-authentication.
        let mut s = with_reauth(&[]);
        s.handshake("PLAIN", 1).unwrap();
        let step = s.token(b"\0alice\0alice-secret", &none, &nonce, now);
        assert_eq!(lifetime(step.unwrap()), 0);
        assert!(!s.expired(i64::MAX));
        assert!(!s.begin_reauthentication(now + 5_000));
        // connections.max.reauth.ms for PLAIN.
        let mut s = with_reauth(&[("PLAIN", 3_000)]);
        s.handshake("PLAIN", 1).unwrap();
        let step = s.token(b"\0alice\0alice-secret", &none, &nonce, now);
        assert_eq!(lifetime(step.unwrap()), 3_000);
        assert!(!s.expired(now + 3_000));
        assert!(s.expired(now + 3_001));
        // An OAUTHBEARER token's exp bounds the session, with or without the setting.
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let token = format!(
            "n,,\u{1}auth=Bearer {}.{}.\u{1}\u{1}",
            b64(r#"{"alg":"none"}"#),
            b64(r#"{"sub":"alice","exp":1700000010}"#)
        );
        for (max, expected) in [(None, 10_000), (Some(4_000), 4_000), (Some(60_000), 10_000)] {
            let mut s = with_reauth(
                &max.map(|m| ("OAUTHBEARER", m))
                    .into_iter()
                    .collect::<Vec<_>>(),
            );
            s.handshake("OAUTHBEARER", 1).unwrap();
            let step = s.token(token.as_bytes(), &none, &nonce, now).unwrap();
            assert_eq!(lifetime(step), expected, "max {max:?}");
        }
    }

    #[test]
    fn reauthentication_keeps_the_principal_and_the_mechanism() {
        let nonce = || "n".to_string();
        let now = 1_700_000_000_000;
        let login = |s: &mut Session, token: &[u8], at: i64| {
            s.handshake("PLAIN", 1)?;
            s.token(token, &none, &nonce, at)
        };
        let mut s = with_reauth(&[("PLAIN", 3_000)]);
        login(&mut s, b"\0alice\0alice-secret", now).unwrap();
        // Re-authenticated as the same user: a new lifetime from now.
        assert!(s.begin_reauthentication(now + 2_500));
        assert!(s.reauthenticating() && !s.authenticated() && !s.expired(now + 9_000));
        assert_eq!(s.principal(), Some("User:alice"));
        let again = login(&mut s, b"\0alice\0alice-secret", now + 2_600).unwrap();
        assert_eq!(lifetime(again), 3_000);
        assert!(s.authenticated() && !s.reauthenticating());
        assert!(!s.expired(now + 5_600) && s.expired(now + 5_601));
        // Not twice within a second.
        assert!(!s.begin_reauthentication(now + 3_000));
        assert!(s.authenticated());
        // As another user: refused with Kafka's words, and the session fails.
        assert!(s.begin_reauthentication(now + 3_600));
        let r = login(&mut s, b"\0bob\0bob-secret", now + 3_700);
        assert_eq!(
            r,
            Err(Refusal::Failed(
                "Cannot change principals during re-authentication from User.alice: User.bob"
                    .to_string()
            ))
        );
        assert!(!s.authenticated());
        // With another mechanism: refused at the handshake.
        let mut s = with_reauth(&[("PLAIN", 3_000)]);
        login(&mut s, b"\0alice\0alice-secret", now).unwrap();
        assert!(s.begin_reauthentication(now + 1_000));
        assert!(matches!(
            s.handshake("OAUTHBEARER", 1),
            Err(Refusal::UnsupportedMechanism(m)) if m.contains("re-authentication")
        ));
        // A wrong password at re-authentication fails it.
        let mut s = with_reauth(&[("PLAIN", 3_000)]);
        login(&mut s, b"\0alice\0alice-secret", now).unwrap();
        assert!(s.begin_reauthentication(now + 1_000));
        assert!(login(&mut s, b"\0alice\0wrong", now + 1_100).is_err());
        assert!(!s.authenticated() && s.reauthenticating());
    }

    #[test]
    fn scram_for_a_user_without_a_credential_fails_at_client_first() {
        let mut s = session();
        s.handshake("SCRAM-SHA-256", 1).unwrap();
        let r = s.token(b"n,,n=ghost,r=abc", &none, &|| "n".to_string(), 0);
        assert!(matches!(r, Err(Refusal::Failed(_))));
    }
}
