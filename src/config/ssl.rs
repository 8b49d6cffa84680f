//! The `ssl.*` keys of a TLS listener, as Kafka reads them: each key may be given for one
//! listener as `listener.name.<name in lower case>.ssl.*`, which wins over the unprefixed
//! key. This module only reads and checks the text; `crate::tls` loads the stores.

use std::path::PathBuf;

use regex::Regex;

use super::keys::Props;
use super::{invalid, ConfigError};

/// What a TLS listener is configured with.
#[derive(Debug, Clone)]
pub struct Ssl {
    /// The broker's own key and certificate chain.
    pub keystore: Store,
    /// The certificates client certificates are checked against.
    pub truststore: Option<Store>,
    pub client_auth: ClientAuth,
    /// `ssl.enabled.protocols`, in the order given.
    pub protocols: Vec<TlsVersion>,
    /// `ssl.cipher.suites` as given (IANA names); empty means the TLS stack's defaults.
    pub cipher_suites: Vec<String>,
    /// `ssl.principal.mapping.rules`.
    pub principal_rules: Vec<PrincipalRule>,
    /// `ssl.endpoint.identification.algorithm`: `https` (true, the default) when this
    /// broker, dialling another on this listener, checks that the certificate names the
    /// host it dialled; empty (false) checks the chain only.
    pub verify_hostname: bool,
}

/// A keystore or truststore: a file, or PEM text given in the config itself.
#[derive(Debug, Clone)]
pub struct Store {
    /// The key that named it, for messages (`ssl.keystore.location`, ...), with the
    /// listener prefix if it had one.
    pub key: String,
    pub kind: StoreKind,
    pub source: StoreSource,
    pub password: Option<String>,
    /// `ssl.key.password`: a keystore's private key password, if it differs.
    pub key_password: Option<String>,
}

/// `ssl.keystore.type` / `ssl.truststore.type`. Kafka's default is JKS; a Java keystore
/// file is read as PKCS12 when it is one (as Java's `keystore.type.compat` does), and a real
/// JKS file is refused at start-up with the command that converts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Jks,
    Pkcs12,
    Pem,
}

#[derive(Debug, Clone)]
pub enum StoreSource {
    File(PathBuf),
    /// PEM text: the certificates (`ssl.keystore.certificate.chain`,
    /// `ssl.truststore.certificates`) and, for a keystore, `ssl.keystore.key`.
    Inline {
        certificates: String,
        key: Option<String>,
    },
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// One rule of `ssl.principal.mapping.rules` (Kafka's `SslPrincipalMapper`): `DEFAULT`
/// keeps the distinguished name; `RULE:pattern/replacement/[L|U]` applies when the pattern
/// matches the whole name.
#[derive(Debug, Clone)]
pub enum PrincipalRule {
    Default,
    Rule {
        pattern: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Keep,
    Lower,
    Upper,
}

/// Maps a certificate's distinguished name (RFC 2253) to a principal name by the first
/// rule that matches; `None` when none does (the handshake then fails, as in Kafka).
pub fn map_principal(rules: &[PrincipalRule], dn: &str) -> Option<String> {
    rules.iter().find_map(|r| match r {
        PrincipalRule::Default => Some(dn.to_string()),
        PrincipalRule::Rule {
            pattern,
            replacement,
            case,
        } => {
            let caps = pattern.captures(dn)?;
            let mut out = String::new();
            caps.expand(replacement, &mut out);
            Some(match case {
                Case::Keep => out,
                Case::Lower => out.to_lowercase(),
                Case::Upper => out.to_uppercase(),
            })
        }
    })
}

/// The `ssl.*` settings of listener `name`.
pub(super) fn parse(p: &Props<'_>, name: &str) -> Result<Ssl, ConfigError> {
    let prefix = format!("listener.name.{}.", name.to_ascii_lowercase());
    // The key that decides `key` for this listener, and its value.
    let get = |key: &str| -> Option<(String, String)> {
        let prefixed = format!("{prefix}{key}");
        p.get(&prefixed)
            .map(|v| (prefixed, v.to_string()))
            .or_else(|| p.get(key).map(|v| (key.to_string(), v.to_string())))
            .filter(|(_, v)| !v.is_empty())
    };
    let text = |key: &str| get(key).map(|(_, v)| v);
    let keystore = store(&get, "keystore", name)?.ok_or_else(|| {
        invalid(
            "ssl.keystore.location",
            "",
            &format!(
                "listener {name} speaks TLS and needs a keystore: ssl.keystore.location (or \
                 ssl.keystore.certificate.chain and ssl.keystore.key with ssl.keystore.type=PEM), \
                 also settable for it alone as {prefix}ssl.keystore.location"
            ),
        )
    })?;
    let truststore = store(&get, "truststore", name)?;
    let client_auth = match get("ssl.client.auth") {
        None => ClientAuth::None,
        Some((key, v)) => match v.to_ascii_lowercase().as_str() {
            "none" => ClientAuth::None,
            "requested" => ClientAuth::Requested,
            "required" => ClientAuth::Required,
            _ => return Err(invalid(&key, &v, "expected none, requested or required")),
        },
    };
    if client_auth != ClientAuth::None && truststore.is_none() {
        return Err(invalid(
            &format!("{prefix}ssl.truststore.location"),
            "",
            &format!(
                "listener {name} asks for client certificates (ssl.client.auth) but has no \
                 truststore to check them against"
            ),
        ));
    }
    let protocols = protocols(&get)?;
    let cipher_suites = text("ssl.cipher.suites")
        .map(|v| list(&v))
        .unwrap_or_default();
    let principal_rules = match get("ssl.principal.mapping.rules") {
        None => vec![PrincipalRule::Default],
        Some((key, v)) => parse_rules(&v).map_err(|reason| invalid(&key, &v, &reason))?,
    };
    let verify_hostname = {
        // An empty value is meaningful here (no host name check), so it is not skipped.
        let key = [format!("{prefix}ssl.endpoint.identification.algorithm")]
            .into_iter()
            .find(|k| p.get(k).is_some())
            .unwrap_or_else(|| "ssl.endpoint.identification.algorithm".to_string());
        let v = p.get(&key).unwrap_or("https").trim();
        match v.to_ascii_lowercase().as_str() {
            "https" => true,
            "" => false,
            _ => {
                return Err(invalid(
                    &key,
                    v,
                    "expected https or nothing (no host name check)",
                ))
            }
        }
    };
    Ok(Ssl {
        keystore,
        truststore,
        client_auth,
        protocols,
        cipher_suites,
        principal_rules,
        verify_hostname,
    })
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The keystore (`which` = "keystore") or truststore of a listener, if one is configured.
fn store(
    get: &dyn Fn(&str) -> Option<(String, String)>,
    which: &str,
    listener: &str,
) -> Result<Option<Store>, ConfigError> {
    let kind = match get(&format!("ssl.{which}.type")) {
        None => StoreKind::Jks,
        Some((key, v)) => match v.to_ascii_uppercase().as_str() {
            "JKS" => StoreKind::Jks,
            "PKCS12" => StoreKind::Pkcs12,
            "PEM" => StoreKind::Pem,
            _ => return Err(invalid(&key, &v, "expected PKCS12, PEM or JKS")),
        },
    };
    let location = get(&format!("ssl.{which}.location"));
    let inline_certs = if which == "keystore" {
        get("ssl.keystore.certificate.chain")
    } else {
        get("ssl.truststore.certificates")
    };
    let inline_key = if which == "keystore" {
        get("ssl.keystore.key")
    } else {
        None
    };
    let password = get(&format!("ssl.{which}.password")).map(|(_, v)| v);
    let key_password = if which == "keystore" {
        get("ssl.key.password").map(|(_, v)| v)
    } else {
        None
    };
    let (key, source) = match (location, inline_certs) {
        (None, None) => {
            if let Some((key, _)) = inline_key {
                return Err(invalid(
                    &key,
                    "<hidden>",
                    "needs ssl.keystore.certificate.chain as well",
                ));
            }
            return Ok(None);
        }
        (Some((key, _)), Some((both, _))) => {
            return Err(invalid(
                &key,
                "",
                &format!("{both} is set too; a {which} is a file or PEM text, not both"),
            ))
        }
        (Some((key, path)), None) => (key, StoreSource::File(PathBuf::from(path))),
        (None, Some((key, certificates))) => {
            if kind != StoreKind::Pem {
                return Err(invalid(
                    &key,
                    "",
                    &format!("PEM text needs ssl.{which}.type=PEM"),
                ));
            }
            if which == "keystore" && inline_key.is_none() {
                return Err(invalid(&key, "", "needs ssl.keystore.key as well"));
            }
            (
                key,
                StoreSource::Inline {
                    certificates,
                    key: inline_key.map(|(_, v)| v),
                },
            )
        }
    };
    tracing::debug!(listener, key = %key, "tls store configured");
    Ok(Some(Store {
        key,
        kind,
        source,
        password,
        key_password,
    }))
}

/// `ssl.enabled.protocols`, else `ssl.protocol` and what it implies (Kafka's default is
/// TLSv1.2 and TLSv1.3). Older versions are refused: no maintained TLS stack offers them.
fn protocols(
    get: &dyn Fn(&str) -> Option<(String, String)>,
) -> Result<Vec<TlsVersion>, ConfigError> {
    let Some((key, v)) = get("ssl.enabled.protocols") else {
        return Ok(vec![TlsVersion::Tls12, TlsVersion::Tls13]);
    };
    let mut out = Vec::new();
    for name in list(&v) {
        let version = match name.as_str() {
            "TLSv1.2" => TlsVersion::Tls12,
            "TLSv1.3" => TlsVersion::Tls13,
            _ => {
                return Err(invalid(
                    &key,
                    &v,
                    &format!("{name} is not supported; use TLSv1.2 and/or TLSv1.3"),
                ))
            }
        };
        if !out.contains(&version) {
            out.push(version);
        }
    }
    if out.is_empty() {
        return Err(invalid(&key, &v, "at least one protocol is needed"));
    }
    Ok(out)
}

/// Parses `ssl.principal.mapping.rules`: `DEFAULT` and `RULE:pattern/replacement/[L|U]`
/// entries separated by commas or new lines; `\` escapes a `/` or `,` inside a rule.
pub fn parse_rules(v: &str) -> Result<Vec<PrincipalRule>, String> {
    let mut rules = Vec::new();
    let mut rest = v.trim_start();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("DEFAULT") {
            rules.push(PrincipalRule::Default);
            rest = after;
        } else if let Some(after) = rest.strip_prefix("RULE:") {
            let (pattern, after) = until_slash(after).ok_or("a RULE needs pattern/replacement/")?;
            let (replacement, after) =
                until_slash(after).ok_or("a RULE needs pattern/replacement/")?;
            let (case, after) = match after.chars().next() {
                Some('L') => (Case::Lower, &after[1..]),
                Some('U') => (Case::Upper, &after[1..]),
                _ => (Case::Keep, after),
            };
            let pattern = Regex::new(&format!("^(?:{pattern})$"))
                .map_err(|e| format!("bad pattern {pattern}: {e}"))?;
            rules.push(PrincipalRule::Rule {
                pattern,
                replacement: java_replacement(&replacement),
                case,
            });
            rest = after;
        } else {
            return Err(format!(
                "expected DEFAULT or RULE:pattern/replacement/[L|U] at '{rest}'"
            ));
        }
        rest = rest.trim_start_matches([' ', '\t']);
        match rest.chars().next() {
            None => {}
            Some(',') | Some('\n') => rest = rest[1..].trim_start(),
            Some(_) => return Err(format!("expected ',' between rules at '{rest}'")),
        }
    }
    if rules.is_empty() {
        return Err("no rules".into());
    }
    Ok(rules)
}

/// The text up to the next unescaped `/`, unescaped, and what follows that `/`.
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => out.push('/'),
                Some((_, other)) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            '/' => return Some((out, &s[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

/// A Java replacement (`$1`, `\$`) in the regex crate's syntax (`${1}`, `$$`).
fn java_replacement(r: &str) -> String {
    let mut out = String::new();
    let mut chars = r.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    out.push_str("$$");
                } else {
                    out.push_str(&format!("${{{digits}}}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rules: &str, dn: &str) -> Option<String> {
        map_principal(&parse_rules(rules).unwrap(), dn)
    }

    #[test]
    fn principal_rules_as_kafka_documents_them() {
        // Kafka's documentation example.
        let rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT";
        assert_eq!(
            map(
                rules,
                "CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
            )
            .as_deref(),
            Some("serviceuser")
        );
        assert_eq!(
            map(
                rules,
                "CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
            )
            .as_deref(),
            Some("adminuser@admin")
        );
        assert_eq!(map(rules, "O=x").as_deref(), Some("O=x"));
        assert_eq!(map("DEFAULT", "CN=a,O=b").as_deref(), Some("CN=a,O=b"));
        // No rule matches: no principal (the handshake fails).
        assert_eq!(map("RULE:^CN=(.*)$/$1/U", "O=b"), None);
        assert_eq!(map("RULE:^CN=(.*)$/$1/U", "CN=bob").as_deref(), Some("BOB"));
        // An escaped slash, new lines between rules, a literal dollar.
        assert_eq!(
            map("RULE:^CN=a\\/b$/x\\$y/\n DEFAULT", "CN=a/b").as_deref(),
            Some("x$y")
        );
    }

    #[test]
    fn bad_rules_are_refused() {
        assert!(parse_rules("").is_err());
        assert!(parse_rules("RULE:abc").is_err());
        assert!(parse_rules("RULE:(/x/").is_err());
        assert!(parse_rules("DEFAULT DEFAULT").is_err());
        assert!(parse_rules("NOPE").is_err());
    }
}
