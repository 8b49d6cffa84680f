//! TLS listeners: the rustls server configuration built from a listener's `ssl.*` settings
//! (PKCS12 and PEM stores, client authentication, versions, cipher suites), and the
//! principal a client certificate maps to.
//!
//! Everything that can be wrong with the files fails start-up, with the key and the file
//! named; a client whose handshake fails loses only its own connection.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::config::ssl::{self, ClientAuth, PrincipalRule, Ssl, Store, StoreKind, StoreSource};

/// The first four bytes of a Java KeyStore (JKS) file.
const JKS_MAGIC: [u8; 4] = [0xFE, 0xED, 0xFE, 0xED];

/// A TLS listener: the handshake, then the principal of what the client presented.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: TlsAcceptor,
    rules: Arc<[PrincipalRule]>,
}

impl Tls {
    /// Builds listener `name`'s TLS from its settings, reading its stores now.
    pub fn load(name: &str, s: &Ssl) -> anyhow::Result<Tls> {
        let provider = Arc::new(provider(s)?);
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = s
            .protocols
            .iter()
            .map(|v| match v {
                ssl::TlsVersion::Tls12 => &rustls::version::TLS12,
                ssl::TlsVersion::Tls13 => &rustls::version::TLS13,
            })
            .collect();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .with_context(|| {
                format!(
                    "listener {name}: ssl.enabled.protocols and ssl.cipher.suites leave no \
                     usable combination"
                )
            })?;
        let builder = match (&s.truststore, s.client_auth) {
            (Some(store), auth) if auth != ClientAuth::None => {
                let mut roots = RootCertStore::empty();
                for cert in trusted(store)? {
                    roots.add(cert).with_context(|| {
                        format!("{}: a certificate cannot be trusted", store.key)
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
                let verifier = if auth == ClientAuth::Requested {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                builder.with_client_cert_verifier(
                    verifier
                        .build()
                        .with_context(|| format!("{}: no usable trusted certificate", store.key))?,
                )
            }
            _ => builder.with_no_client_auth(),
        };
        let (chain, key) = key_and_chain(&s.keystore)?;
        let config = builder
            .with_single_cert(chain, key)
            .with_context(|| format!("{}: the key does not fit the certificate", s.keystore.key))?;
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            rules: s.principal_rules.clone().into(),
        })
    }

    /// The principal of a connection whose handshake presented `peer` (the client's chain,
    /// leaf first): `User:` and the certificate's subject as the mapping rules make it, or
    /// `User:ANONYMOUS` without a certificate. An error when no rule matches.
    pub fn principal(&self, peer: Option<&[CertificateDer<'_>]>) -> anyhow::Result<String> {
        let Some(leaf) = peer.and_then(|c| c.first()) else {
            return Ok(ANONYMOUS.to_string());
        };
        let dn = subject_dn(leaf)?;
        ssl::map_principal(&self.rules, &dn)
            .map(|name| format!("User:{name}"))
            .ok_or_else(|| anyhow!("no ssl.principal.mapping.rules rule matches {dn}"))
    }
}

/// The principal of a client that did not authenticate.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// ring's provider, its suites narrowed to `ssl.cipher.suites` when that is set. Kafka takes
/// the IANA names; rustls names the TLS 1.3 suites `TLS13_*`.
///
/// rustls now marks ring's provider deprecated because it offers no post-quantum key
/// exchange; aws-lc-rs would add a CMake build of AWS-LC to every cold build. Kafka's own
/// JDK 17 TLS offers none either, so clients lose nothing they have with Kafka.
#[allow(deprecated)]
fn provider(s: &Ssl) -> anyhow::Result<CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    if s.cipher_suites.is_empty() {
        return Ok(p);
    }
    let iana = |suite: &rustls::SupportedCipherSuite| {
        suite
            .suite()
            .as_str()
            .map(|n| n.replacen("TLS13_", "TLS_", 1))
            .unwrap_or_default()
    };
    for wanted in &s.cipher_suites {
        if !p.cipher_suites.iter().any(|c| &iana(c) == wanted) {
            let known: Vec<String> = p.cipher_suites.iter().map(iana).collect();
            bail!(
                "ssl.cipher.suites: {wanted} is not supported; the supported suites are {}",
                known.join(",")
            );
        }
    }
    p.cipher_suites
        .retain(|c| s.cipher_suites.contains(&iana(c)));
    Ok(p)
}

/// The bytes of a store's file, or of its PEM text.
fn read(store: &Store) -> anyhow::Result<Vec<u8>> {
    match &store.source {
        StoreSource::File(path) => std::fs::read(path)
            .with_context(|| format!("{}: cannot read {}", store.key, path.display())),
        StoreSource::Inline { certificates, key } => {
            let mut text = certificates.clone().into_bytes();
            if let Some(k) = key {
                text.push(b'\n');
                text.extend_from_slice(k.as_bytes());
            }
            Ok(text)
        }
    }
}

/// A store file's real kind: JKS (Kafka's default type) is read as PKCS12 when the file is
/// one, as Java does; a real JKS file is refused with the command that converts it.
fn kind(store: &Store, bytes: &[u8]) -> anyhow::Result<StoreKind> {
    match store.kind {
        StoreKind::Pem => Ok(StoreKind::Pem),
        StoreKind::Jks | StoreKind::Pkcs12 if bytes.starts_with(&JKS_MAGIC) => {
            let path = match &store.source {
                StoreSource::File(p) => p.display().to_string(),
                StoreSource::Inline { .. } => String::new(),
            };
            bail!(
                "{}: {path} is a JKS keystore, which Cairn cannot read. Convert it to PKCS12 \
                 with `keytool -importkeystore -srckeystore {path} -destkeystore {path}.p12 \
                 -deststoretype PKCS12` and point the setting at the .p12 file (type PKCS12)",
                store.key
            )
        }
        StoreKind::Jks | StoreKind::Pkcs12 => Ok(StoreKind::Pkcs12),
    }
}

fn pkcs12(store: &Store, bytes: &[u8]) -> anyhow::Result<p12_keystore::KeyStore> {
    let password = store.password.as_deref().unwrap_or("");
    p12_keystore::KeyStore::from_pkcs12(bytes, password).map_err(|e| {
        anyhow!(
            "{}: cannot read the PKCS12 store (wrong ssl.*.password, or not PKCS12): {e}",
            store.key
        )
    })
}

/// The keystore's private key and certificate chain.
fn key_and_chain(
    store: &Store,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let bytes = read(store)?;
    match kind(store, &bytes)? {
        StoreKind::Pem => {
            if String::from_utf8_lossy(&bytes).contains("ENCRYPTED PRIVATE KEY") {
                bail!(
                    "{}: encrypted PEM keys are not supported yet; decrypt it with `openssl \
                     pkcs8 -topk8 -nocrypt` and keep the file readable by the broker only",
                    store.key
                );
            }
            let chain = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("{}: bad PEM certificate", store.key))?;
            if chain.is_empty() {
                bail!("{}: no certificate in the PEM text", store.key);
            }
            let key = PrivateKeyDer::from_pem_slice(&bytes)
                .with_context(|| format!("{}: no private key in the PEM text", store.key))?;
            Ok((chain, key))
        }
        _ => {
            let ks = pkcs12(store, &bytes)?;
            let (_, entry) = ks
                .private_key_chain()
                .ok_or_else(|| anyhow!("{}: the PKCS12 store holds no private key", store.key))?;
            let chain = entry
                .chain()
                .iter()
                .map(|c| CertificateDer::from(c.as_der().to_vec()))
                .collect();
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(entry.key().to_vec()));
            Ok((chain, key))
        }
    }
}

/// The certificates a truststore holds.
fn trusted(store: &Store) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let bytes = read(store)?;
    let certs: Vec<CertificateDer<'static>> = match kind(store, &bytes)? {
        StoreKind::Pem => CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<_, _>>()
            .with_context(|| format!("{}: bad PEM certificate", store.key))?,
        _ => pkcs12(store, &bytes)?
            .entries()
            .flat_map(|(_, e)| match e {
                p12_keystore::KeyStoreEntry::Certificate(c) => vec![c.as_der().to_vec()],
                p12_keystore::KeyStoreEntry::PrivateKeyChain(k) => {
                    k.chain().iter().map(|c| c.as_der().to_vec()).collect()
                }
                p12_keystore::KeyStoreEntry::Secret(_) => Vec::new(),
            })
            .map(CertificateDer::from)
            .collect(),
    };
    if certs.is_empty() {
        bail!(
            "{}: the truststore holds no trusted certificate (in a PKCS12 truststore they are \
             marked trusted, as `keytool -importcert` marks them)",
            store.key
        );
    }
    Ok(certs)
}

/// The attribute names Java's RFC 2253 form spells out; others are written as `OID=#hex`.
const RFC2253_NAMES: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// A certificate's subject as Java's `X500Principal.getName()` writes it (RFC 2253): the
/// last relative name first, no spaces after commas, `+` inside a multi-valued name.
pub fn subject_dn(cert: &CertificateDer<'_>) -> anyhow::Result<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| anyhow!("cannot parse the client certificate: {e}"))?;
    let rdns: Vec<String> = parsed
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    let known = RFC2253_NAMES.iter().find(|(o, _)| *o == oid);
                    match (known, atv.as_str()) {
                        (Some((_, name)), Ok(v)) => format!("{name}={}", escape(v)),
                        _ => format!("{oid}=#{}", der_hex(atv.attr_value())),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// RFC 2253 escaping of an attribute value.
fn escape(v: &str) -> String {
    let mut out = String::new();
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The DER encoding of an attribute value, in hex: tag, length, content.
fn der_hex(v: &x509_parser::asn1_rs::Any<'_>) -> String {
    let data = v.data;
    let mut der = vec![v.tag().0 as u8];
    match data.len() {
        n if n < 0x80 => der.push(n as u8),
        n if n <= 0xFF => der.extend([0x81, n as u8]),
        n => der.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    der.extend_from_slice(data);
    der.iter().map(|b| format!("{b:02x}")).collect()
}
