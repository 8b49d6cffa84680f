//! TLS configurations built from a listener's `ssl.*` settings (PKCS12 and PEM stores,
//! client authentication, versions, cipher suites): the server side of a TLS listener, and
//! the client side of this broker's connections to other brokers on the inter-broker
//! listener (its truststore to check them, its keystore to present when they ask).
//!
//! Everything that can be wrong with the files fails start-up, with the key and the file
//! named.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use crate::config::ssl::{self, ClientAuth, Ssl, Store, StoreKind, StoreSource};

/// A connection, plaintext or TLS.
pub trait Conn: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + Sync {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + Sync> Conn for T {}

pub type Stream = Box<dyn Conn>;

/// TCP to `addr` (`host:port`), then a TLS handshake with `tls` when given, the host
/// checked against the certificate. A handshake refused by TLS itself (a certificate
/// either side does not trust, say) is a `PermissionDenied` error; a connection lost
/// under the handshake keeps its own kind.
pub async fn connect(
    addr: &str,
    tls: Option<&tokio_rustls::TlsConnector>,
) -> std::io::Result<Stream> {
    use std::io::{Error, ErrorKind};
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| Error::new(ErrorKind::InvalidInput, e))?;
    match tls.connect(name, tcp).await {
        Ok(s) => Ok(Box::new(s)),
        // rustls's own errors (a certificate refused either way, no common protocol):
        // PermissionDenied. A connection lost under the handshake keeps its kind.
        Err(e) => {
            let kind = match e.kind() {
                ErrorKind::InvalidData => ErrorKind::PermissionDenied,
                kind => kind,
            };
            Err(Error::new(kind, format!("TLS handshake with {addr}: {e}")))
        }
    }
}

/// Both sides of TLS on one listener, for connections among the nodes themselves (the
/// controller quorum): each node accepts with the listener's server side and dials with
/// its client side.
#[derive(Clone)]
pub struct Mutual {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub connector: tokio_rustls::TlsConnector,
}

impl Mutual {
    pub fn load(name: &str, s: &Ssl) -> anyhow::Result<Mutual> {
        Ok(Mutual {
            acceptor: Arc::new(server_config(name, s)?).into(),
            connector: Arc::new(client_config(name, s)?).into(),
        })
    }
}

/// The first four bytes of a Java KeyStore (JKS) file.
const JKS_MAGIC: [u8; 4] = [0xFE, 0xED, 0xFE, 0xED];

/// Listener `name`'s server side, its stores read now.
pub fn server_config(name: &str, s: &Ssl) -> anyhow::Result<ServerConfig> {
    let provider = Arc::new(provider(s)?);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions(s))
        .with_context(|| no_combination(name))?;
    let builder = match (&s.truststore, s.client_auth) {
        (Some(store), auth) if auth != ClientAuth::None => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(store)?),
                provider.clone(),
            );
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
    builder
        .with_single_cert(chain, key)
        .with_context(|| format!("{}: the key does not fit the certificate", s.keystore.key))
}

/// Listener `name`'s client side, for this broker's connections to the others on it: their
/// certificates checked against the listener's truststore (and, unless
/// `ssl.endpoint.identification.algorithm` is empty, for the host dialled), the listener's
/// keystore presented when they ask for a client certificate.
pub fn client_config(name: &str, s: &Ssl) -> anyhow::Result<ClientConfig> {
    let provider = Arc::new(provider(s)?);
    let Some(store) = &s.truststore else {
        bail!(
            "listener {name} is the inter-broker listener: this broker checks the other \
             brokers' certificates against its truststore, and ssl.truststore.location (or \
             listener.name.{}.ssl.truststore.location) is not set",
            name.to_ascii_lowercase()
        );
    };
    let chain_check =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots(store)?), provider.clone())
            .build()
            .with_context(|| format!("{}: no usable trusted certificate", store.key))?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions(s))
        .with_context(|| no_combination(name))?;
    let builder = match s.verify_hostname {
        true => builder.with_webpki_verifier(chain_check),
        false => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyHostName(chain_check))),
    };
    let (chain, key) = key_and_chain(&s.keystore)?;
    builder
        .with_client_auth_cert(chain, key)
        .with_context(|| format!("{}: the key does not fit the certificate", s.keystore.key))
}

/// The chain checked as WebPKI checks it, whatever host name the certificate is for
/// (`ssl.endpoint.identification.algorithm=` empty, as Kafka allows).
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The certificates a truststore holds, as rustls trusts them.
fn roots(store: &Store) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in trusted(store)? {
        roots
            .add(cert)
            .with_context(|| format!("{}: a certificate cannot be trusted", store.key))?;
    }
    Ok(roots)
}

/// `ssl.enabled.protocols` as rustls versions.
fn versions(s: &Ssl) -> Vec<&'static rustls::SupportedProtocolVersion> {
    s.protocols
        .iter()
        .map(|v| match v {
            ssl::TlsVersion::Tls12 => &rustls::version::TLS12,
            ssl::TlsVersion::Tls13 => &rustls::version::TLS13,
        })
        .collect()
}

fn no_combination(name: &str) -> String {
    format!(
        "listener {name}: ssl.enabled.protocols and ssl.cipher.suites leave no usable combination"
    )
}

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

/// A PEM keystore's private key. As Kafka's PEM store reads it: with `ssl.key.password`
/// the key must be an encrypted PKCS#8 key (`ENCRYPTED PRIVATE KEY`, PBES2, as `openssl
/// pkcs8 -topk8` writes it), without one a plain key.
fn pem_key(store: &Store, bytes: &[u8]) -> anyhow::Result<PrivateKeyDer<'static>> {
    const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    let text = String::from_utf8_lossy(bytes);
    let encrypted = text
        .find(BEGIN)
        .and_then(|b| Some((b, text[b..].find(END)?)))
        .map(|(b, len)| &text[b + BEGIN.len()..b + len]);
    match (encrypted, store.key_password.as_deref()) {
        (None, None) => PrivateKeyDer::from_pem_slice(bytes)
            .with_context(|| format!("{}: no private key in the PEM text", store.key)),
        (Some(_), None) => bail!(
            "{}: the private key is encrypted; give its password in ssl.key.password",
            store.key
        ),
        (None, Some(_)) => bail!(
            "{}: ssl.key.password is set but the PEM text has no encrypted private key \
             (ENCRYPTED PRIVATE KEY, PKCS#8)",
            store.key
        ),
        (Some(base64_text), Some(password)) => {
            use base64::Engine;
            let der: String = base64_text.split_whitespace().collect();
            let der = base64::engine::general_purpose::STANDARD
                .decode(der)
                .with_context(|| format!("{}: bad base64 in the encrypted key", store.key))?;
            let key = decrypt_pkcs8(&der, password).map_err(|e| {
                anyhow!(
                    "{}: cannot decrypt the private key (wrong ssl.key.password, or not a \
                     PBES2 key; `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes one): {e}",
                    store.key
                )
            })?;
            Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)))
        }
    }
}

/// The PKCS#8 `PrivateKeyInfo` inside an `EncryptedPrivateKeyInfo` (RFC 5958): a sequence
/// of the encryption scheme and the encrypted octets.
fn decrypt_pkcs8(der: &[u8], password: &str) -> anyhow::Result<Vec<u8>> {
    use der::{asn1::OctetStringRef, Decode, Reader, SliceReader};
    let mut reader = SliceReader::new(der).map_err(|e| anyhow!("{e}"))?;
    let (scheme, data) = reader
        .sequence(|r| {
            let scheme = pkcs5::EncryptionScheme::decode(r)?;
            let data = OctetStringRef::decode(r)?;
            Ok((scheme, data))
        })
        .map_err(|e| anyhow!("not an encrypted PKCS#8 key: {e}"))?;
    let key = scheme
        .decrypt(password, data.as_bytes())
        .map_err(|e| anyhow!("{e}"))?;
    // A wrong password passes the padding check now and then: the result must parse.
    der::Document::from_der(&key).map_err(|e| anyhow!("the decrypted key does not parse: {e}"))?;
    Ok(key)
}

/// The keystore's private key and certificate chain.
fn key_and_chain(
    store: &Store,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let bytes = read(store)?;
    match kind(store, &bytes)? {
        StoreKind::Pem => {
            let chain = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("{}: bad PEM certificate", store.key))?;
            if chain.is_empty() {
                bail!("{}: no certificate in the PEM text", store.key);
            }
            Ok((chain, pem_key(store, &bytes)?))
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
