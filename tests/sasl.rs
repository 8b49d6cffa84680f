//! SASL listeners against the real binary, at the protocol level: SaslHandshake v0 and v1,
//! SaslAuthenticate, PLAIN with the JAAS users, and every way to get it wrong (wrong
//! password, unknown mechanism, requests before authentication, tokens before the
//! handshake) closing that connection only, answered with Kafka's error code and counted as
//! a failed authentication; thousands of failed logins leave the broker serving. SCRAM is
//! driven by real clients in compat-tests/security (kcat, the Java tools).

mod common;

use std::net::SocketAddr;

use bytes::{BufMut, BytesMut};
use common::{free_port, http_get, metric_value, refuses_to_start, Broker, Client};
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

const JAAS: &str = "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
    org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_alice=\"alice-secret\" \
    user_bob=\"bob-secret\";";

struct Sasl {
    broker: Broker,
    sasl: SocketAddr,
    metrics: SocketAddr,
    _dir: tempfile::TempDir,
}

fn start() -> Sasl {
    start_with(&[])
}

fn start_with(extra: &[&str]) -> Sasl {
    let plain = free_port();
    let sasl = free_port();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let overrides = [
        format!("listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"),
        format!("metrics.listener={metrics}"),
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256".to_string(),
        JAAS.to_string(),
    ];
    let mut refs: Vec<&str> = overrides.iter().map(String::as_str).collect();
    refs.extend_from_slice(extra);
    let mut broker = Broker::launch_in(&dir.path().join("data"), plain, &refs);
    broker.await_listening();
    Sasl {
        broker,
        sasl: format!("127.0.0.1:{sasl}").parse().unwrap(),
        metrics,
        _dir: dir,
    }
}

fn handshake(c: &mut Client, mechanism: &str, version: i16) -> SaslHandshakeResponse {
    c.send(
        ApiKey::SaslHandshake,
        version,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into())),
    )
}

fn authenticate(c: &mut Client, token: &[u8]) -> SaslAuthenticateResponse {
    c.send(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(token.to_vec().into()),
    )
}

fn metadata(c: &mut Client) -> MetadataResponse {
    c.send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(Vec::new())),
    )
}

/// A connection that logs in as alice with PLAIN over handshake v1.
fn logged_in(addr: SocketAddr) -> Client {
    let mut c = Client::connect(addr);
    assert_eq!(handshake(&mut c, "PLAIN", 1).error_code, 0);
    let r = authenticate(&mut c, b"\0alice\0alice-secret");
    assert_eq!(r.error_code, 0, "{r:?}");
    c
}

fn authentications(metrics: SocketAddr) -> (f64, f64) {
    let (_, text) = http_get(metrics, "/metrics");
    let get =
        |name: &str| metric_value(&text, name, &[("listener", "SASL_PLAINTEXT")]).unwrap_or(-1.0);
    (
        get("kafka_server_socket_server_metrics_successful_authentication_total"),
        get("kafka_server_socket_server_metrics_failed_authentication_total"),
    )
}

#[test]
fn plain_logins_are_served_and_every_wrong_one_loses_only_its_connection() {
    let s = start();
    // Handshake v1: the enabled mechanisms are listed; then SaslAuthenticate.
    let mut alice = Client::connect(s.sasl);
    let h = handshake(&mut alice, "PLAIN", 1);
    assert_eq!(h.error_code, 0);
    let listed: Vec<String> = h.mechanisms.iter().map(|m| m.to_string()).collect();
    assert_eq!(listed, vec!["PLAIN", "SCRAM-SHA-256"]);
    assert_eq!(
        authenticate(&mut alice, b"\0alice\0alice-secret").error_code,
        0
    );
    assert_eq!(
        metadata(&mut alice).brokers[0].port,
        i32::from(s.sasl.port())
    );
    // Without connections.max.reauth.ms a session has no lifetime; a second handshake or
    // SaslAuthenticate is ILLEGAL_SASL_STATE and the connection goes on, as in Kafka.
    assert_eq!(handshake(&mut alice, "PLAIN", 1).error_code, 34);
    let again = authenticate(&mut alice, b"\0alice\0alice-secret");
    assert_eq!((again.error_code, again.session_lifetime_ms), (34, 0));
    assert_eq!(metadata(&mut alice).brokers.len(), 1);

    // Handshake v0: the token travels bare, and so does the (empty) answer.
    let mut raw = Client::connect(s.sasl);
    assert_eq!(handshake(&mut raw, "PLAIN", 0).error_code, 0);
    let token = b"alice\0alice\0alice-secret";
    let mut frame = BytesMut::new();
    frame.put_i32(token.len() as i32);
    frame.put_slice(token);
    raw.send_raw(&frame);
    assert_eq!(raw.read_frame().expect("the bare answer").len(), 0);
    assert!(metadata(&mut raw).brokers.len() == 1);

    // Each of these is answered with Kafka's error (where Kafka answers) and closed.
    let mut failures = 0;
    let mut wrong = Client::connect(s.sasl);
    handshake(&mut wrong, "PLAIN", 1);
    let r = authenticate(&mut wrong, b"\0alice\0wrong");
    assert_eq!(r.error_code, 58, "SASL_AUTHENTICATION_FAILED: {r:?}");
    assert!(r.error_message.is_some());
    assert!(wrong.is_closed());
    failures += 1;

    let mut unknown_user = Client::connect(s.sasl);
    handshake(&mut unknown_user, "PLAIN", 1);
    assert_eq!(
        authenticate(&mut unknown_user, b"\0mallory\0alice-secret").error_code,
        58
    );
    assert!(unknown_user.is_closed());
    failures += 1;

    let mut gssapi = Client::connect(s.sasl);
    let h = handshake(&mut gssapi, "GSSAPI", 1);
    assert_eq!(h.error_code, 33, "UNSUPPORTED_SASL_MECHANISM");
    assert_eq!(h.mechanisms.len(), 2, "the enabled ones are listed");
    assert!(gssapi.is_closed());
    failures += 1;

    let mut scram_nobody = Client::connect(s.sasl);
    handshake(&mut scram_nobody, "SCRAM-SHA-256", 1);
    assert_eq!(
        authenticate(&mut scram_nobody, b"n,,n=nobody,r=abcdef").error_code,
        58
    );
    assert!(scram_nobody.is_closed());
    failures += 1;

    let mut garbage = Client::connect(s.sasl);
    handshake(&mut garbage, "SCRAM-SHA-256", 1);
    assert_eq!(
        authenticate(&mut garbage, &[0xff, 0x00, 0x17]).error_code,
        58
    );
    assert!(garbage.is_closed());
    failures += 1;

    // A request other than ApiVersions before authenticating: closed, no answer.
    let mut eager = Client::connect(s.sasl);
    let frame = eager.frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    eager.send_raw(&frame);
    assert!(eager.read_frame().is_none());
    failures += 1;

    // SaslAuthenticate before any handshake: ILLEGAL_SASL_STATE, then closed.
    let mut early = Client::connect(s.sasl);
    assert_eq!(
        authenticate(&mut early, b"\0alice\0alice-secret").error_code,
        34
    );
    assert!(early.is_closed());

    // On a listener without SASL, SaslHandshake is ILLEGAL_SASL_STATE and the connection
    // goes on.
    let mut plain = s.broker.client();
    assert_eq!(handshake(&mut plain, "PLAIN", 1).error_code, 34);
    assert_eq!(metadata(&mut plain).brokers.len(), 1);

    // Thousands of failed logins in a row, from four clients at once.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let addr = s.sasl;
            std::thread::spawn(move || {
                for _ in 0..750 {
                    let mut c = Client::connect(addr);
                    handshake(&mut c, "PLAIN", 1);
                    assert_eq!(authenticate(&mut c, b"\0alice\0guess").error_code, 58);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    failures += 3000;

    // Those who logged in are still served, and a new login works.
    assert_eq!(metadata(&mut alice).brokers.len(), 1);
    assert_eq!(metadata(&mut raw).brokers.len(), 1);
    assert_eq!(metadata(&mut logged_in(s.sasl)).brokers.len(), 1);
    let (ok, failed) = authentications(s.metrics);
    assert_eq!(ok, 3.0, "alice three times");
    // The early SaslAuthenticate is refused before any mechanism ran: not a login attempt.
    assert_eq!(
        failed,
        f64::from(failures),
        "each failed login counted once"
    );
}

/// KIP-368 with `connections.max.reauth.ms` for PLAIN on the SASL listener: the lifetime
/// goes to the client, a re-authentication as the same user renews it, one as another user
/// fails, one within a second of the last is refused, a request after the lifetime
/// closes the connection and a re-authentication after it does not. Each is counted under Kafka's metric names.
#[test]
fn sessions_end_after_connections_max_reauth_ms_unless_the_client_reauthenticates() {
    const LIFETIME_MS: i64 = 1_500;
    let key = format!("listener.name.sasl_plaintext.plain.connections.max.reauth.ms={LIFETIME_MS}");
    let s = start_with(&[&key]);
    let login = |c: &mut Client, token: &[u8]| {
        assert_eq!(handshake(c, "PLAIN", 1).error_code, 0);
        authenticate(c, token)
    };
    let mut alice = Client::connect(s.sasl);
    let r = login(&mut alice, b"\0alice\0alice-secret");
    assert_eq!((r.error_code, r.session_lifetime_ms), (0, LIFETIME_MS));
    let mut lapses = Client::connect(s.sasl);
    assert_eq!(login(&mut lapses, b"\0alice\0alice-secret").error_code, 0);
    let mut other = Client::connect(s.sasl);
    assert_eq!(login(&mut other, b"\0alice\0alice-secret").error_code, 0);
    // Re-authenticated as alice: a new lifetime, and the connection goes on.
    let r = login(&mut alice, b"\0alice\0alice-secret");
    assert_eq!((r.error_code, r.session_lifetime_ms), (0, LIFETIME_MS));
    assert_eq!(metadata(&mut alice).brokers.len(), 1);
    // Within a second of the last re-authentication, a handshake does not begin another:
    // ILLEGAL_SASL_STATE, and the connection goes on.
    assert_eq!(handshake(&mut alice, "PLAIN", 1).error_code, 34);
    assert_eq!(metadata(&mut alice).brokers.len(), 1);
    // Re-authenticating as bob: refused with Kafka's words, and closed.
    let r = login(&mut other, b"\0bob\0bob-secret");
    assert_eq!(r.error_code, 58);
    assert_eq!(
        r.error_message.as_deref(),
        Some("Cannot change principals during re-authentication from User.alice: User.bob")
    );
    assert!(other.is_closed());

    // Past the lifetime without a re-authentication: the next request closes the
    // connection, unanswered.
    std::thread::sleep(std::time::Duration::from_millis(LIFETIME_MS as u64 + 300));
    let frame = lapses.frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    lapses.send_raw(&frame);
    assert!(
        lapses.read_frame().is_none(),
        "an expired session is served"
    );
    // alice's renewed lifetime has ended by now too, but a SaslHandshake after the end
    // still begins a re-authentication, as in Kafka: a client first waits for its
    // requests in flight (a JoinGroup held for a rebalance, say).
    let r = login(&mut alice, b"\0alice\0alice-secret");
    assert_eq!((r.error_code, r.session_lifetime_ms), (0, LIFETIME_MS));
    assert_eq!(metadata(&mut alice).brokers.len(), 1);
    // A new login is served.
    assert_eq!(metadata(&mut logged_in(s.sasl)).brokers.len(), 1);

    let (_, text) = http_get(s.metrics, "/metrics");
    let get =
        |name: &str| metric_value(&text, name, &[("listener", "SASL_PLAINTEXT")]).unwrap_or(-1.0);
    assert_eq!(
        get("kafka_server_socket_server_metrics_successful_reauthentication_total"),
        2.0
    );
    assert_eq!(
        get("kafka_server_socket_server_metrics_failed_reauthentication_total"),
        1.0
    );
    assert_eq!(
        get("kafka_server_socket_server_metrics_expired_connections_killed_count"),
        1.0
    );
    assert_eq!(
        authentications(s.metrics),
        (4.0, 0.0),
        "logins are counted apart"
    );
}

const OAUTH_JAAS: &str = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=\
    org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
    unsecuredLoginStringClaim_sub=\"admin\" unsecuredValidatorRequiredScope=\"kafka\";";

/// An unsecured JWS (`"alg":"none"`) with these claims.
fn unsecured_jws(claims: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(claims))
}

#[test]
fn oauthbearer_accepts_unsecured_tokens_with_the_required_scope() {
    let plain = free_port();
    let sasl = free_port();
    let dir = tempfile::tempdir().unwrap();
    let listeners =
        format!("listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}");
    let overrides = [
        listeners.as_str(),
        "sasl.enabled.mechanisms=OAUTHBEARER",
        OAUTH_JAAS,
    ];
    let mut broker = Broker::launch_in(&dir.path().join("data"), plain, &overrides);
    broker.await_listening();
    let addr: SocketAddr = format!("127.0.0.1:{sasl}").parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let first = |claims: String| {
        format!("n,,\u{1}auth=Bearer {}\u{1}\u{1}", unsecured_jws(&claims)).into_bytes()
    };
    // A valid token with the scope: logged in, and served.
    let mut c = Client::connect(addr);
    assert_eq!(handshake(&mut c, "OAUTHBEARER", 1).error_code, 0);
    let good = format!(r#"{{"sub":"alice","exp":{},"scope":"kafka"}}"#, now + 600);
    let r = authenticate(&mut c, &first(good));
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(metadata(&mut c).throttle_time_ms, 0);
    // Expired, and without the scope: Kafka's error challenge, then 58 on the client's
    // \x01, and the connection closes.
    for (claims, status) in [
        (
            format!(r#"{{"sub":"alice","exp":{},"scope":"kafka"}}"#, now - 600),
            "invalid_token",
        ),
        (
            format!(r#"{{"sub":"alice","exp":{}}}"#, now + 600),
            "insufficient_scope",
        ),
    ] {
        let mut c = Client::connect(addr);
        assert_eq!(handshake(&mut c, "OAUTHBEARER", 1).error_code, 0);
        let r = authenticate(&mut c, &first(claims));
        assert_eq!(r.error_code, 0);
        let challenge: serde_json::Value = serde_json::from_slice(&r.auth_bytes).unwrap();
        assert_eq!(challenge["status"], status);
        let r = authenticate(&mut c, b"\x01");
        assert_eq!(r.error_code, 58, "{r:?}");
        assert!(c.is_closed());
    }
}

#[test]
fn bad_sasl_settings_stop_start_up_with_the_key_named() {
    let listener = "listeners=SASL_PLAINTEXT://127.0.0.1:0";
    for (settings, expected) in [
        // Kafka's default mechanism is GSSAPI, which Cairn does not serve.
        (vec![listener], vec!["sasl.enabled.mechanisms", "GSSAPI"]),
        (
            vec![listener, "sasl.enabled.mechanisms=PLAIN"],
            vec!["listener.name.sasl_plaintext.plain.sasl.jaas.config"],
        ),
        (
            vec![
                listener,
                "sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config=Plain required user_a=\"secret-pw\"",
            ],
            vec!["plain.sasl.jaas.config", "';'"],
        ),
        (
            vec![
                listener,
                "sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required user_a=\"secret-pw\";",
            ],
            vec!["PlainLoginModule"],
        ),
        (
            vec![listener, "sasl.enabled.mechanisms=GSSAPI"],
            vec!["GSSAPI is not supported"],
        ),
        (
            vec![listener, "sasl.enabled.mechanisms=OAUTHBEARER"],
            vec!["listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"],
        ),
        (
            vec![
                listener,
                "sasl.enabled.mechanisms=OAUTHBEARER",
                OAUTH_JAAS,
                "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            ],
            vec!["unsecured validator"],
        ),
        (
            vec![listener, "connections.max.reauth.ms=soon"],
            vec!["connections.max.reauth.ms", "soon"],
        ),
        (
            vec![
                listener,
                "listener.name.sasl_plaintext.plain.connections.max.reauth.ms=1h",
            ],
            vec!["connections.max.reauth.ms", "1h"],
        ),
    ] {
        refuses_to_start(&settings, &expected, "secret-pw");
    }
}
