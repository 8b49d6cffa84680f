//! The SASL keys of a SASL_PLAINTEXT or SASL_SSL listener, as Kafka reads them:
//! `sasl.enabled.mechanisms` (per listener as `listener.name.<l>.sasl.enabled.mechanisms`)
//! and, for PLAIN, the users of the JAAS config
//! `listener.name.<l>.plain.sasl.jaas.config` (`user_<name>="password"` options of
//! PlainLoginModule). SCRAM's credentials live in the cluster metadata instead.

use std::collections::BTreeMap;

use super::keys::Props;
use super::{invalid, ConfigError};
use crate::security::sasl::Accepted;

/// The mechanisms Cairn serves.
const SUPPORTED: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

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
        let jaas_key = format!("{prefix}plain.sasl.jaas.config");
        let jaas = p.get(&jaas_key).ok_or_else(|| {
            invalid(
                &jaas_key,
                "",
                &format!(
                    "listener {name} enables PLAIN and needs its users, as in Kafka: \
                     {jaas_key}=org.apache.kafka.common.security.plain.PlainLoginModule \
                     required user_alice=\"alice-secret\";"
                ),
            )
        })?;
        let (module, options) =
            parse_jaas(jaas).map_err(|reason| invalid(&jaas_key, "<hidden>", &reason))?;
        if !module.ends_with("PlainLoginModule") {
            return Err(invalid(
                &jaas_key,
                "<hidden>",
                &format!("PLAIN needs PlainLoginModule, not {module}"),
            ));
        }
        plain_users = options
            .into_iter()
            .filter_map(|(k, v)| k.strip_prefix("user_").map(|u| (u.to_string(), v)))
            .collect();
    }
    Ok(Accepted {
        mechanisms,
        plain_users,
    })
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
