//! The SASL keys of a SASL_PLAINTEXT or SASL_SSL listener, as Kafka reads them:
//! `sasl.enabled.mechanisms` (per listener as `listener.name.<l>.sasl.enabled.mechanisms`)
//! and, for PLAIN, the users of the JAAS config
//! `listener.name.<l>.plain.sasl.jaas.config` (`user_<name>="password"` options of
//! PlainLoginModule). SCRAM's credentials live in the cluster metadata instead. OAUTHBEARER
//! uses Kafka's default unsecured validator, whose options come from
//! `listener.name.<l>.oauthbearer.sasl.jaas.config` (OAuthBearerLoginModule). A session's
//! longest life is `connections.max.reauth.ms`, per listener and mechanism as
//! `listener.name.<l>.<mechanism>.connections.max.reauth.ms` (KIP-368).

use std::collections::BTreeMap;

use super::keys::Props;
use super::{invalid, ConfigError};
use crate::security::oauthbearer::{UnsecuredLogin, Validator};
use crate::security::sasl::Accepted;

/// The mechanisms Cairn serves.
const SUPPORTED: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

/// The SASL settings of listener `name`.
pub(super) fn parse(p: &Props<'_>, name: &str) -> Result<Accepted, ConfigError> {
    let prefix = format!("listener.name.{}.", name.to_ascii_lowercase());
    let (key, value) = [
        format!("{prefix}sasl.enabled.mechanisms"),
        "sasl.enabled.mechanisms".to_string(),
    ]
    .into_iter()
    .find_map(|k| p.get(&k).map(|v| (k, v.to_string())))
    .unwrap_or_else(|| {
        (
            "sasl.enabled.mechanisms".to_string(),
            p.text("sasl.enabled.mechanisms").to_string(),
        )
    });
    let mechanisms: Vec<String> = value
        .split(',')
        .map(|m| m.trim().to_ascii_uppercase())
        .filter(|m| !m.is_empty())
        .collect();
    if mechanisms.is_empty() {
        return Err(invalid(&key, &value, "no mechanism is enabled"));
    }
    if let Some(m) = mechanisms.iter().find(|m| !SUPPORTED.contains(&m.as_str())) {
        return Err(invalid(
            &key,
            &value,
            &format!(
                "{m} is not supported (listener {name}); Cairn serves {}",
                SUPPORTED.join(", ")
            ),
        ));
    }
    let mut plain_users = BTreeMap::new();
    if mechanisms.iter().any(|m| m == "PLAIN") {
        let (_, options) = login_module(
            p,
            name,
            &prefix,
            "PLAIN",
            "org.apache.kafka.common.security.plain.PlainLoginModule",
            "its users",
            "user_alice=\"alice-secret\"",
        )?;
        plain_users = options
            .into_iter()
            .filter_map(|(k, v)| k.strip_prefix("user_").map(|u| (u.to_string(), v)))
            .collect();
    }
    let oauthbearer = match mechanisms.iter().any(|m| m == "OAUTHBEARER") {
        true => oauthbearer(p, name, &prefix)?,
        false => Validator::default(),
    };
    let mut max_reauth_ms = BTreeMap::new();
    for m in &mechanisms {
        let keys = [
            format!(
                "{prefix}{}.connections.max.reauth.ms",
                m.to_ascii_lowercase()
            ),
            format!("{prefix}connections.max.reauth.ms"),
        ];
        let ms = p.int_first(&keys, "connections.max.reauth.ms")?;
        if ms > 0 {
            max_reauth_ms.insert(m.clone(), ms);
        }
    }
    Ok(Accepted {
        mechanisms,
        plain_users,
        oauthbearer,
        max_reauth_ms,
    })
}

/// How this broker logs in to the others on a SASL inter-broker listener: Kafka's
/// `sasl.mechanism.inter.broker.protocol`, and the options of the listener's login module
/// for that mechanism: `username` and `password`, or for OAUTHBEARER the unsecured token's
/// claims.
#[derive(Debug, Clone)]
pub struct Login {
    pub mechanism: String,
    /// Who this broker logs in as (the token's principal for OAUTHBEARER).
    pub username: String,
    pub secret: Secret,
}

#[derive(Clone)]
pub enum Secret {
    Password(String),
    /// A fresh token at every login (Kafka's unsecured login callback handler).
    UnsecuredToken(UnsecuredLogin),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Secret::Password(_) => "Password(<hidden>)",
            Secret::UnsecuredToken(_) => "UnsecuredToken(<hidden>)",
        })
    }
}

/// The login of inter-broker listener `name`, whose SASL settings are `accepted`.
pub(super) fn inter_broker_login(
    p: &Props<'_>,
    name: &str,
    accepted: &Accepted,
) -> Result<Login, ConfigError> {
    login(p, name, accepted, Role::InterBroker)
}

/// The login of controller listener `name`, whose SASL settings are `accepted`: voters
/// log in to each other, and brokers to the active controller, with it. SCRAM's
/// credentials live in the metadata the quorum itself carries, so the quorum cannot need
/// them to form (Kafka asks for credentials bootstrapped at format time, KIP-900, which
/// Cairn has not): PLAIN and OAUTHBEARER only.
pub(super) fn controller_login(
    p: &Props<'_>,
    name: &str,
    accepted: &Accepted,
) -> Result<Login, ConfigError> {
    if let Some(m) = accepted.mechanisms.iter().find(|m| m.starts_with("SCRAM")) {
        // The key as written: the listener's own, else the unprefixed one.
        let prefixed = format!(
            "listener.name.{}.sasl.enabled.mechanisms",
            name.to_ascii_lowercase()
        );
        let key = match p.get(&prefixed) {
            Some(_) => prefixed,
            None => "sasl.enabled.mechanisms".to_string(),
        };
        return Err(invalid(
            &key,
            &accepted.mechanisms.join(","),
            &format!(
                "{name} is the controller listener, which takes PLAIN or OAUTHBEARER, not {m}: \
                 SCRAM credentials live in the metadata the controllers replicate, so the \
                 quorum cannot need them to form"
            ),
        ));
    }
    login(p, name, accepted, Role::Controller)
}

/// Whose login a listener's is.
#[derive(Clone, Copy)]
enum Role {
    InterBroker,
    Controller,
}

impl Role {
    fn key(self) -> &'static str {
        match self {
            Role::InterBroker => "sasl.mechanism.inter.broker.protocol",
            Role::Controller => "sasl.mechanism.controller.protocol",
        }
    }

    fn listener(self) -> &'static str {
        match self {
            Role::InterBroker => "inter-broker listener",
            Role::Controller => "controller listener",
        }
    }

    fn who(self) -> &'static str {
        match self {
            Role::InterBroker => "brokers authenticate to each other",
            Role::Controller => "nodes authenticate to the controllers",
        }
    }

    fn mechanisms(self) -> &'static [&'static str] {
        match self {
            Role::InterBroker => &SUPPORTED,
            Role::Controller => &["PLAIN", "OAUTHBEARER"],
        }
    }
}

fn login(p: &Props<'_>, name: &str, accepted: &Accepted, role: Role) -> Result<Login, ConfigError> {
    let key = role.key();
    let mechanism = p.text(key).trim().to_ascii_uppercase();
    if !accepted.mechanisms.contains(&mechanism) {
        return Err(invalid(
            key,
            &mechanism,
            &format!(
                "{} on listener {name} with this mechanism, which must be one of its \
                 sasl.enabled.mechanisms ({})",
                role.who(),
                accepted.mechanisms.join(",")
            ),
        ));
    }
    let class = match mechanism.as_str() {
        m if !role.mechanisms().contains(&m) => None,
        "PLAIN" => Some("org.apache.kafka.common.security.plain.PlainLoginModule"),
        "SCRAM-SHA-256" | "SCRAM-SHA-512" => {
            Some("org.apache.kafka.common.security.scram.ScramLoginModule")
        }
        "OAUTHBEARER" => {
            Some("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule")
        }
        _ => None,
    };
    let Some(class) = class else {
        return Err(invalid(
            key,
            &mechanism,
            &format!(
                "{} with {} in Cairn",
                role.who(),
                role.mechanisms().join(", ")
            ),
        ));
    };
    let prefix = format!("listener.name.{}.", name.to_ascii_lowercase());
    let oauthbearer = mechanism == "OAUTHBEARER";
    let (jaas_key, mut options) = login_module(
        p,
        name,
        &prefix,
        &mechanism,
        class,
        "the login this node logs in to the others with",
        match oauthbearer {
            true => "unsecuredLoginStringClaim_sub=\"broker\"",
            false => "username=\"broker\" password=\"broker-secret\"",
        },
    )?;
    if oauthbearer {
        let login = UnsecuredLogin::from_options(&options).map_err(|e| {
            invalid(
                &jaas_key,
                "<hidden>",
                &format!(
                    "listener {name} is the {}: its login module {e}",
                    role.listener()
                ),
            )
        })?;
        return Ok(Login {
            mechanism,
            username: login.principal.clone(),
            secret: Secret::UnsecuredToken(login),
        });
    }
    match (options.remove("username"), options.remove("password")) {
        (Some(username), Some(password)) => Ok(Login {
            mechanism,
            username,
            secret: Secret::Password(password),
        }),
        _ => Err(invalid(
            &jaas_key,
            "<hidden>",
            &format!(
                "listener {name} is the {}: its {mechanism} login module needs username and \
                 password options, what this node logs in to the others with",
                role.listener()
            ),
        )),
    }
}

/// OAUTHBEARER's validator: Kafka's unsecured one (the default when no server callback
/// handler is set), with the options of the listener's OAuthBearerLoginModule entry.
fn oauthbearer(p: &Props<'_>, name: &str, prefix: &str) -> Result<Validator, ConfigError> {
    for key in [
        format!("{prefix}oauthbearer.sasl.server.callback.handler.class"),
        "sasl.server.callback.handler.class".to_string(),
    ] {
        if let Some(class) = p.get(&key).filter(|c| !c.trim().is_empty()) {
            return Err(invalid(
                &key,
                class,
                "Cairn validates OAUTHBEARER tokens only with Kafka's default unsecured \
                 validator (for tests and development); leave the handler unset",
            ));
        }
    }
    let (jaas_key, options) = login_module(
        p,
        name,
        prefix,
        "OAUTHBEARER",
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
        "its login module",
        "unsecuredLoginStringClaim_sub=\"admin\"",
    )?;
    let mut v = Validator::default();
    if let Some(c) = options.get("unsecuredValidatorPrincipalClaimName") {
        v.principal_claim = c.clone();
    }
    if let Some(c) = options.get("unsecuredValidatorScopeClaimName") {
        v.scope_claim = c.clone();
    }
    if let Some(scopes) = options.get("unsecuredValidatorRequiredScope") {
        v.required_scope = scopes
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
    }
    if let Some(skew) = options.get("unsecuredValidatorAllowableClockSkewMs") {
        v.skew_ms = skew.trim().parse().map_err(|_| {
            invalid(
                &jaas_key,
                "<hidden>",
                &format!(
                    "unsecuredValidatorAllowableClockSkewMs must be a number of ms, not {skew}"
                ),
            )
        })?;
    }
    Ok(v)
}

/// The options of listener `name`'s JAAS entry for `mechanism`
/// (`listener.name.<l>.<mechanism>.sasl.jaas.config`), whose login module must be `class`;
/// a missing entry is refused naming the key, with `example` options. Returns the key too.
fn login_module(
    p: &Props<'_>,
    name: &str,
    prefix: &str,
    mechanism: &str,
    class: &str,
    needs: &str,
    example: &str,
) -> Result<(String, BTreeMap<String, String>), ConfigError> {
    let key = format!(
        "{prefix}{}.sasl.jaas.config",
        mechanism.to_ascii_lowercase()
    );
    let jaas = p.get(&key).ok_or_else(|| {
        invalid(
            &key,
            "",
            &format!(
                "listener {name} enables {mechanism} and needs {needs}, as in Kafka: \
                 {key}={class} required {example};"
            ),
        )
    })?;
    let (module, options) =
        parse_jaas(jaas).map_err(|reason| invalid(&key, "<hidden>", &reason))?;
    let short = class.rsplit('.').next().unwrap_or(class);
    if !module.ends_with(short) {
        return Err(invalid(
            &key,
            "<hidden>",
            &format!("{mechanism} needs {short}, not {module}"),
        ));
    }
    Ok((key, options))
}

/// One JAAS login module entry, `Class flag key="value" ...;`: the class and the options.
pub fn parse_jaas(text: &str) -> Result<(String, BTreeMap<String, String>), String> {
    let mut chars = text.trim().chars().peekable();
    let word = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut w = String::new();
        while let Some(c) = chars.peek().copied() {
            if c.is_whitespace() || c == '=' || c == ';' {
                break;
            }
            w.push(c);
            chars.next();
        }
        w
    };
    let module = word(&mut chars);
    let flag = word(&mut chars);
    if module.is_empty()
        || !["required", "requisite", "sufficient", "optional"].contains(&flag.as_str())
    {
        return Err("expected 'LoginModuleClass required key=\"value\" ...;'".to_string());
    }
    let mut options = BTreeMap::new();
    loop {
        let key = word(&mut chars);
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('=') {
            return Err(format!("option {key} has no value"));
        }
        let value = if chars.peek() == Some(&'"') {
            chars.next();
            let mut v = String::new();
            loop {
                match chars.next() {
                    Some('\\') => v.extend(chars.next()),
                    Some('"') => break,
                    Some(c) => v.push(c),
                    None => return Err(format!("option {key}'s value has no closing quote")),
                }
            }
            v
        } else {
            word(&mut chars)
        };
        options.insert(key, value);
    }
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
    match (chars.next(), chars.next()) {
        (Some(';'), None) => Ok((module, options)),
        _ => Err("a JAAS entry ends with ';'".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaas_entries_as_kafka_documents_them() {
        let (module, options) = parse_jaas(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required
               username="admin" password="admin-secret"
               user_admin="admin-secret" user_alice="al\"ice";"#,
        )
        .unwrap();
        assert_eq!(
            module,
            "org.apache.kafka.common.security.plain.PlainLoginModule"
        );
        assert_eq!(options["user_alice"], "al\"ice");
        assert_eq!(options["username"], "admin");
        assert_eq!(options.len(), 4);
        assert!(parse_jaas("Module required user_a=\"x\"").is_err());
        assert!(parse_jaas("Module maybe;").is_err());
        assert!(parse_jaas("Module required user_a=\"x;").is_err());
        assert!(parse_jaas("Module required user_a;").is_err());
        assert_eq!(parse_jaas("M required;").unwrap().1.len(), 0);
    }
}
