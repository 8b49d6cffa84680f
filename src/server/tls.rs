//! TLS listeners: the handshake (the rustls server configuration `crate::tls` builds from a
//! listener's `ssl.*` settings), and the principal a client certificate maps to. A client
//! whose handshake fails loses only its own connection.

use std::sync::Arc;

use anyhow::anyhow;
use rustls::pki_types::CertificateDer;
use tokio_rustls::TlsAcceptor;

use crate::config::ssl::{self, PrincipalRule, Ssl};

/// A TLS listener: the handshake, then the principal of what the client presented.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: TlsAcceptor,
    rules: Arc<[PrincipalRule]>,
}

impl Tls {
    /// Builds listener `name`'s TLS from its settings, reading its stores now.
    pub fn load(name: &str, s: &Ssl) -> anyhow::Result<Tls> {
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(crate::tls::server_config(name, s)?)),
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
