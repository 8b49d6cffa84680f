//! TLS listeners against the real binary: clients served over TLS beside PLAINTEXT ones,
//! client certificates checked and mapped to principals, `openssl s_client` for the
//! handshake, and every bad handshake closing its own connection only, counted as a failed
//! authentication. Certificates come from scripts/make-test-certs.sh.

// ring's provider, as the broker uses it (src/server/tls.rs says why it is deprecated).
#![allow(deprecated)]

mod common;

use std::io::Write;
use std::net::{Shutdown, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::{
    batch, free_port, http_get, metric_value, refuses_to_start, test_certs, Broker, Client,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

fn cert(name: &str) -> String {
    test_certs().join(name).display().to_string()
}

/// A TLS connection to `addr` trusting the test CA, presenting `user`'s certificate if
/// given. Errors are the handshake's; a server that refuses the client certificate may
/// only say so on the first read (TLS 1.3).
fn tls(addr: SocketAddr, user: Option<&str>) -> std::io::Result<Client> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(cert("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match user {
        None => builder.with_no_client_auth(),
        Some(u) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert(&format!("{u}.pem")))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(cert(&format!("{u}.key"))).unwrap(),
            )
            .unwrap(),
    };
    let name = ServerName::try_from("127.0.0.1").unwrap().to_owned();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tcp = Client::tcp(addr);
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)?;
    }
    Ok(Client::over(Box::new(rustls::StreamOwned::new(conn, tcp))))
}

/// Whether `c` is served: an ApiVersions request gets its answer.
fn served(c: &mut Client) -> bool {
    let frame = c.frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    // After the length, the API key and the version.
    let correlation = i32::from_be_bytes(frame[8..12].try_into().unwrap());
    if c.stream.write_all(&frame).is_err() {
        return false;
    }
    c.read_frame().is_some_and(|body| {
        let r: ApiVersionsResponse =
            cairn::wire::decode_response(ApiKey::ApiVersions, 3, correlation, body).unwrap();
        r.error_code == 0
    })
}

/// A TLS connection as `user` that the broker serves (handshake and a request).
fn tls_served(addr: SocketAddr, user: Option<&str>) -> bool {
    tls(addr, user).is_ok_and(|mut c| served(&mut c))
}

/// A running broker with a PLAINTEXT listener (its `addr`), an SSL one and a metrics one.
struct Secured {
    broker: Broker,
    tls: SocketAddr,
    metrics: SocketAddr,
    _dir: tempfile::TempDir,
}

fn start(ssl: &[&str]) -> Secured {
    let plain = free_port();
    let tls_port = free_port();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut overrides = vec![
        format!("listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls_port}"),
        format!("metrics.listener={metrics}"),
    ];
    overrides.extend(ssl.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = overrides.iter().map(String::as_str).collect();
    let mut broker = Broker::launch_in(&dir.path().join("data"), plain, &refs);
    broker.await_listening();
    Secured {
        broker,
        tls: format!("127.0.0.1:{tls_port}").parse().unwrap(),
        metrics,
        _dir: dir,
    }
}

/// The listener's authentication counters: (successful, failed).
fn authentications(metrics: SocketAddr, listener: &str) -> (f64, f64) {
    let (_, text) = http_get(metrics, "/metrics");
    let get = |name: &str| metric_value(&text, name, &[("listener", listener)]).unwrap_or(-1.0);
    (
        get("kafka_server_socket_server_metrics_successful_authentication_total"),
        get("kafka_server_socket_server_metrics_failed_authentication_total"),
    )
}

/// The start of a real TLS ClientHello, as a client sends it.
fn client_hello() -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap().to_owned();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    hello
}

/// Sends `bytes` on a new TCP connection to `addr`, ends its writing side, and says whether
/// the broker closed it without a Kafka answer.
fn closed_after(addr: SocketAddr, bytes: &[u8]) -> bool {
    let mut c = Client::over(Box::new({
        let mut s = Client::tcp(addr);
        s.write_all(bytes).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        s
    }));
    c.read_frame().is_none()
}

#[test]
fn tls_clients_are_served_beside_plaintext_ones_and_bad_handshakes_lose_only_their_own() {
    // The keystore's type is left at Kafka's default (JKS): the file is PKCS12, and read as
    // such. The truststore is PKCS12 too, with its password.
    let Secured {
        broker,
        tls: tls_addr,
        metrics,
        _dir,
    } = start(&[
        &format!("ssl.keystore.location={}", cert("broker.p12")),
        "ssl.keystore.password=broker-pass",
        "ssl.truststore.type=PKCS12",
        &format!("ssl.truststore.location={}", cert("ca.p12")),
        "ssl.truststore.password=trust-pass",
        "ssl.client.auth=required",
    ]);
    assert_eq!(authentications(metrics, "SSL"), (0.0, 0.0));

    // Served over TLS: Metadata names the SSL listener's address (the one asked on), and a
    // record produced over TLS is fetched over PLAINTEXT.
    let mut alice = tls(tls_addr, Some("alice")).expect("handshake");
    assert!(served(&mut alice));
    let m: MetadataResponse = alice.send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(Vec::new())),
    );
    assert_eq!(m.brokers[0].port, i32::from(tls_addr.port()), "{m:?}");
    let mut plain = broker.client();
    assert_eq!(plain.create_topic("secret", 1, &[]), 0);
    assert_eq!(alice.produce("secret", 0, batch(&["over tls"]), -1), (0, 0));
    let (error, _, fetched) = plain.fetch("secret", 0, 0);
    assert_eq!(error, 0);
    assert_eq!(fetched[0].1, "over tls");

    // Each of these loses its own connection and counts one failed authentication.
    let bad: Vec<(&str, bool)> = vec![
        (
            "a Kafka request in plaintext on the TLS port",
            closed_after(
                tls_addr,
                &plain.frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()),
            ),
        ),
        (
            "garbage after a TLS record header",
            closed_after(
                tls_addr,
                &[0x16, 0x03, 0x01, 0x00, 0x05, 0xde, 0xad, 0xbe, 0xef, 0x00],
            ),
        ),
        (
            "a truncated ClientHello",
            closed_after(tls_addr, &client_hello()[..20]),
        ),
        ("no client certificate", !tls_served(tls_addr, None)),
        (
            "a certificate from an untrusted CA",
            !tls_served(tls_addr, Some("mallory")),
        ),
        (
            "an expired certificate",
            !tls_served(tls_addr, Some("expired")),
        ),
    ];
    for (what, refused) in &bad {
        assert!(refused, "{what}: served");
    }
    // TLS on the PLAINTEXT port: its first bytes read as an absurd frame length; that
    // connection is closed, and it is not an authentication.
    assert!(closed_after(broker.addr, &client_hello()));

    // Everyone else is still served.
    assert!(served(&mut alice));
    assert!(served(&mut plain));
    assert!(tls_served(tls_addr, Some("bob")));
    assert_eq!(
        authentications(metrics, "SSL"),
        (2.0, bad.len() as f64),
        "alice and bob authenticated; every bad handshake counted once"
    );
    assert_eq!(authentications(metrics, "PLAINTEXT").1, 0.0);
}

#[test]
fn principal_mapping_rules_decide_who_may_connect_and_pem_stores_work() {
    // PEM text in the config itself, for this listener only (Kafka's listener prefix), the
    // key encrypted (ssl.key.password), and a rule that maps only certificates of OU=dev:
    // bob has none, so no principal.
    let chain = std::fs::read_to_string(cert("broker.pem")).unwrap()
        + &std::fs::read_to_string(cert("ca.pem")).unwrap();
    let key = std::fs::read_to_string(cert("broker-enc.key")).unwrap();
    let secured = start(&[
        "listener.name.ssl.ssl.keystore.type=PEM",
        &format!("listener.name.ssl.ssl.keystore.certificate.chain={chain}"),
        &format!("listener.name.ssl.ssl.keystore.key={key}"),
        "listener.name.ssl.ssl.key.password=key-pass",
        "ssl.truststore.type=PEM",
        &format!("ssl.truststore.location={}", cert("ca.pem")),
        "ssl.client.auth=requested",
        "ssl.principal.mapping.rules=RULE:^CN=([a-z]+),OU=dev,O=Cairn$/$1/U",
        "ssl.enabled.protocols=TLSv1.3",
    ]);
    let (tls_addr, metrics) = (secured.tls, secured.metrics);
    // The subject in Java's RFC 2253 form is CN=alice,OU=dev,O=Cairn: the rule matches.
    assert!(tls_served(tls_addr, Some("alice")));
    // CN=bob,O=Cairn matches no rule: refused, as Kafka refuses it.
    assert!(!tls_served(tls_addr, Some("bob")));
    // Requested, not required: no certificate is User:ANONYMOUS, and served.
    assert!(tls_served(tls_addr, None));
    assert_eq!(authentications(metrics, "SSL"), (2.0, 1.0));

    // openssl's view: the chain verifies for 127.0.0.1, TLS 1.3 is spoken and TLS 1.2 is
    // refused (ssl.enabled.protocols).
    let s_client = |extra: &[&str]| {
        let mut cmd = Command::new("openssl");
        cmd.args(["s_client", "-connect", &tls_addr.to_string()])
            .args(["-CAfile", &cert("ca.pem"), "-verify_return_error"])
            .args(["-verify_ip", "127.0.0.1"])
            .args(extra)
            .stdin(Stdio::null());
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (ok, out) = s_client(&["-tls1_3"]);
    assert!(ok, "{out}");
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
    assert!(out.contains("TLSv1.3"), "{out}");
    let (ok, out) = s_client(&["-tls1_2"]);
    assert!(!ok, "TLS 1.2 was accepted: {out}");
}

#[test]
fn bad_tls_settings_stop_start_up_with_the_key_named() {
    let keystore = |path: &str, password: &str| {
        vec![
            format!("ssl.keystore.location={}", cert(path)),
            format!("ssl.keystore.password={password}"),
        ]
    };
    let cases: Vec<(Vec<String>, &[&str])> = vec![
        (
            keystore("broker.jks", "jks-pass"),
            &[
                "is a JKS keystore",
                "keytool -importkeystore",
                "ssl.keystore.location",
            ],
        ),
        (
            keystore("broker.p12", "wrong"),
            &["ssl.keystore.location", "password"],
        ),
        (
            keystore("nothing-here.p12", "x"),
            &["ssl.keystore.location", "cannot read"],
        ),
        (vec![], &["ssl.keystore.location", "listener SSL"]),
        (
            [
                keystore("broker.p12", "broker-pass"),
                vec!["ssl.client.auth=required".into()],
            ]
            .concat(),
            &["ssl.truststore.location", "ssl.client.auth"],
        ),
        (
            [
                keystore("broker.p12", "broker-pass"),
                vec!["ssl.client.auth=maybe".into()],
            ]
            .concat(),
            &["ssl.client.auth", "requested"],
        ),
        (
            [
                keystore("broker.p12", "broker-pass"),
                vec!["ssl.cipher.suites=TLS_RSA_WITH_RC4_128_MD5".into()],
            ]
            .concat(),
            &[
                "ssl.cipher.suites",
                "TLS_RSA_WITH_RC4_128_MD5",
                "TLS_AES_128_GCM_SHA256",
            ],
        ),
        (
            [
                keystore("broker.p12", "broker-pass"),
                vec!["ssl.enabled.protocols=TLSv1.1".into()],
            ]
            .concat(),
            &["ssl.enabled.protocols", "TLSv1.1"],
        ),
        (
            [
                keystore("broker.p12", "broker-pass"),
                vec!["ssl.principal.mapping.rules=RULE:broken".into()],
            ]
            .concat(),
            &["ssl.principal.mapping.rules"],
        ),
    ];
    // Encrypted PEM keys: a wrong or missing ssl.key.password, or one for a plain key.
    let pem = |file: &str, password: Option<&str>| {
        let mut v = vec![
            "ssl.keystore.type=PEM".to_string(),
            format!("ssl.keystore.location={}", cert(file)),
        ];
        v.extend(password.map(|p| format!("ssl.key.password={p}")));
        v
    };
    let mut cases = cases;
    cases.extend([
        (
            pem("broker-enc-key-and-chain.pem", Some("wrong-pass")),
            &[
                "ssl.keystore.location",
                "cannot decrypt",
                "ssl.key.password",
            ][..],
        ),
        (
            pem("broker-enc-key-and-chain.pem", None),
            &["ssl.keystore.location", "encrypted", "ssl.key.password"][..],
        ),
        (
            pem("broker-key-and-chain.pem", Some("key-pass")),
            &["ssl.keystore.location", "no encrypted private key"][..],
        ),
    ]);
    for (settings, expected) in cases {
        let overrides: Vec<&str> = std::iter::once("listeners=SSL://127.0.0.1:0")
            .chain(settings.iter().map(String::as_str))
            .collect();
        refuses_to_start(&overrides, expected, "broker-pass");
    }
    // A node of a cluster replicating over TLS checks the other brokers against its
    // truststore: without one it does not start, and one it cannot read is named.
    let node = |extra: &[String]| {
        let mut v: Vec<String> = [
            "node.id=1",
            "process.roles=broker,controller",
            "controller.quorum.voters=1@127.0.0.1:19093,2@127.0.0.1:2,3@127.0.0.1:3",
            "controller.listener.names=CONTROLLER",
            "listeners=SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:19093",
            "listener.security.protocol.map=SSL:SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=SSL",
        ]
        .map(String::from)
        .to_vec();
        v.extend(keystore("broker.p12", "broker-pass"));
        v.extend_from_slice(extra);
        v
    };
    let no_truststore = node(&[]);
    let no_truststore: Vec<&str> = no_truststore.iter().map(String::as_str).collect();
    refuses_to_start(
        &no_truststore,
        &["inter-broker listener", "ssl.truststore.location"],
        "broker-pass",
    );
    let bad_truststore = node(&[
        format!("ssl.truststore.location={}", cert("ca.p12")),
        "ssl.truststore.password=wrong".to_string(),
    ]);
    let bad_truststore: Vec<&str> = bad_truststore.iter().map(String::as_str).collect();
    refuses_to_start(
        &bad_truststore,
        &["ssl.truststore.location", "password"],
        "trust-pass",
    );
    // A SASL inter-broker listener needs a mechanism it enables (not Kafka's GSSAPI).
    let sasl = [
        "node.id=1",
        "process.roles=broker,controller",
        "controller.quorum.voters=1@127.0.0.1:19093,2@127.0.0.1:2,3@127.0.0.1:3",
        "controller.listener.names=CONTROLLER",
        "listeners=SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:19093",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.\
         plain.PlainLoginModule required username=\"broker\" password=\"b-secret\";",
    ];
    refuses_to_start(
        &sasl,
        &["sasl.mechanism.inter.broker.protocol", "GSSAPI"],
        "b-secret",
    );
}
