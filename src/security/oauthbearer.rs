//! SASL/OAUTHBEARER (RFC 7628, KIP-255) with Kafka's default server-side validator, the
//! unsecured one (`OAuthBearerUnsecuredValidatorCallbackHandler`): the token is a JWS
//! with `"alg":"none"` and an empty signature; its principal comes from a claim (`sub`),
//! `exp` is required and checked against the clock with an allowed skew, `iat` if present
//! must not lie ahead, and scopes can be required. For tests and development, as in Kafka:
//! nothing here checks a signature.

use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use base64::Engine;
use serde_json::Value;

/// The unsecured validator's options, from the listener's OAUTHBEARER JAAS entry
/// (`unsecuredValidatorPrincipalClaimName`, `unsecuredValidatorScopeClaimName`,
/// `unsecuredValidatorRequiredScope`, `unsecuredValidatorAllowableClockSkewMs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validator {
    pub principal_claim: String,
    pub scope_claim: String,
    pub required_scope: Vec<String>,
    pub skew_ms: i64,
}

impl Default for Validator {
    fn default() -> Validator {
        Validator {
            principal_claim: "sub".into(),
            scope_claim: "scope".into(),
            required_scope: Vec::new(),
            skew_ms: 0,
        }
    }
}

/// A token that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The principal's name (without `User:`).
    pub name: String,
    /// When the token expires, in ms since the epoch.
    pub expires_ms: i64,
}

/// Why a token was refused: the status the server's error challenge carries
/// (`invalid_token` or `insufficient_scope`) and the reason for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub status: &'static str,
    pub scope: Option<String>,
    pub reason: String,
}

impl Invalid {
    fn token(reason: impl Into<String>) -> Invalid {
        Invalid {
            status: "invalid_token",
            scope: None,
            reason: reason.into(),
        }
    }

    /// The JSON error challenge sent to the client (RFC 7628 section 3.2.2).
    pub fn challenge(&self) -> Vec<u8> {
        let mut body = serde_json::json!({ "status": self.status });
        if let Some(scope) = &self.scope {
            body["scope"] = Value::String(scope.clone());
        }
        body.to_string().into_bytes()
    }
}

/// The client's first message, `n,[a=authzid],\x01auth=Bearer <token>\x01[k=v\x01]...\x01`:
/// the authorization id, if any, and the token.
pub fn parse_client_first(message: &[u8]) -> Result<(Option<String>, String), String> {
    let bad = || "Invalid OAUTHBEARER client first message".to_string();
    let text = std::str::from_utf8(message).map_err(|_| bad())?;
    let rest = text
        .strip_prefix("n,")
        .or_else(|| text.strip_prefix("y,"))
        .ok_or_else(bad)?;
    let (gs2_authzid, rest) = rest.split_once(',').ok_or_else(bad)?;
    let authzid = match gs2_authzid {
        "" => None,
        a => Some(a.strip_prefix("a=").ok_or_else(bad)?.to_string()),
    };
    let pairs = rest
        .strip_prefix('\u{1}')
        .and_then(|r| r.strip_suffix("\u{1}\u{1}"))
        .ok_or_else(bad)?;
    let mut token = None;
    for pair in pairs.split('\u{1}') {
        let (key, value) = pair.split_once('=').ok_or_else(bad)?;
        if key == "auth" {
            let t = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
                .ok_or_else(bad)?;
            token = Some(t.trim().to_string());
        }
    }
    Ok((authzid, token.ok_or_else(bad)?))
}

/// Validates an unsecured JWS as Kafka's unsecured validator does, at `now_ms`.
pub fn validate(v: &Validator, jws: &str, now_ms: i64) -> Result<Token, Invalid> {
    let parts: Vec<&str> = jws.split('.').collect();
    let [header, payload, signature] = parts[..] else {
        return Err(Invalid::token("the token is not a JWS of three parts"));
    };
    if !signature.is_empty() {
        return Err(Invalid::token(
            "a signed token cannot be checked by the unsecured validator",
        ));
    }
    let decode = |part: &str, what: &str| -> Result<serde_json::Map<String, Value>, Invalid> {
        let bytes = B64URL
            .decode(part.trim_end_matches('='))
            .or_else(|_| B64.decode(part))
            .map_err(|_| Invalid::token(format!("the {what} is not base64url")))?;
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(Invalid::token(format!("the {what} is not a JSON object"))),
        }
    };
    let header = decode(header, "header")?;
    if header.get("alg").and_then(Value::as_str) != Some("none") {
        return Err(Invalid::token("the header's alg must be \"none\""));
    }
    let claims = decode(payload, "payload")?;
    let name = match claims.get(&v.principal_claim) {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        _ => {
            return Err(Invalid::token(format!(
                "the principal claim {} is missing or empty",
                v.principal_claim
            )))
        }
    };
    let time = |claim: &str| -> Result<Option<i64>, Invalid> {
        match claims.get(claim) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64().map(|s| (s * 1000.0) as i64)),
            Some(_) => Err(Invalid::token(format!("the {claim} claim is not a number"))),
        }
    };
    let expires_ms = time("exp")?.ok_or_else(|| Invalid::token("the exp claim is missing"))?;
    if now_ms - v.skew_ms >= expires_ms {
        return Err(Invalid::token("the token has expired"));
    }
    if let Some(issued_ms) = time("iat")? {
        if issued_ms > now_ms + v.skew_ms {
            return Err(Invalid::token("the token was issued in the future"));
        }
        if expires_ms <= issued_ms {
            return Err(Invalid::token("the token expires before it was issued"));
        }
    }
    if !v.required_scope.is_empty() {
        let granted: Vec<String> = match claims.get(&v.scope_claim) {
            Some(Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        if let Some(missing) = v.required_scope.iter().find(|s| !granted.contains(s)) {
            return Err(Invalid {
                status: "insufficient_scope",
                scope: Some(v.required_scope.join(" ")),
                reason: format!("the token lacks the required scope {missing}"),
            });
        }
    }
    Ok(Token { name, expires_ms })
}

/// Kafka's default client-side token maker (`OAuthBearerUnsecuredLoginCallbackHandler`),
/// what a broker logs in to the others with when `sasl.mechanism.inter.broker.protocol` is
/// OAUTHBEARER: an unsecured JWS whose claims come from the OAuthBearerLoginModule's
/// options (`unsecuredLoginStringClaim_<name>`, `unsecuredLoginNumberClaim_<name>`,
/// `unsecuredLoginListClaim_<name>`, the first character of a list its separator), lasting
/// `unsecuredLoginLifetimeSeconds` (3600), with `unsecuredLoginExtension_<name>` SASL
/// extensions.
#[derive(Debug, Clone, PartialEq)]
pub struct UnsecuredLogin {
    /// The principal's name, the value of `unsecuredLoginPrincipalClaimName` (`sub`).
    pub principal: String,
    claims: serde_json::Map<String, Value>,
    lifetime_ms: i64,
    extensions: Vec<(String, String)>,
}

impl UnsecuredLogin {
    /// From the login module's options; an error names the option at fault.
    pub fn from_options(
        options: &std::collections::BTreeMap<String, String>,
    ) -> Result<UnsecuredLogin, String> {
        let mut claims = serde_json::Map::new();
        let mut extensions = Vec::new();
        for (key, value) in options {
            let claim = |prefix: &str| key.strip_prefix(prefix).map(str::to_string);
            if let Some(name) = claim("unsecuredLoginStringClaim_") {
                claims.insert(name, Value::String(value.clone()));
            } else if let Some(name) = claim("unsecuredLoginNumberClaim_") {
                let n: serde_json::Number = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("{key} must be a number, not {value}"))?;
                claims.insert(name, Value::Number(n));
            } else if let Some(name) = claim("unsecuredLoginListClaim_") {
                let mut chars = value.chars();
                let separator = chars.next().unwrap_or(',');
                let items = chars
                    .as_str()
                    .split(separator)
                    .filter(|s| !s.is_empty())
                    .map(|s| Value::String(s.to_string()))
                    .collect();
                claims.insert(name, Value::Array(items));
            } else if let Some(name) = claim("unsecuredLoginExtension_") {
                extensions.push((name, value.clone()));
            }
        }
        if let Some(reserved) = ["iat", "exp"].iter().find(|c| claims.contains_key(**c)) {
            return Err(format!(
                "the {reserved} claim is set by the login itself, not by an option"
            ));
        }
        let principal_claim = options
            .get("unsecuredLoginPrincipalClaimName")
            .map_or("sub", String::as_str);
        let principal = match claims.get(principal_claim) {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            _ => {
                return Err(format!(
                    "needs unsecuredLoginStringClaim_{principal_claim}, the principal this \
                     broker logs in to the others as"
                ))
            }
        };
        let lifetime_s: f64 = match options.get("unsecuredLoginLifetimeSeconds") {
            None => 3600.0,
            Some(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| *s > 0.0)
                .ok_or_else(|| {
                    format!("unsecuredLoginLifetimeSeconds must be a positive number, not {v}")
                })?,
        };
        Ok(UnsecuredLogin {
            principal,
            claims,
            lifetime_ms: (lifetime_s * 1000.0) as i64,
            extensions,
        })
    }

    /// The client's first message with a token issued at `now_ms`.
    pub fn client_first(&self, now_ms: i64) -> Vec<u8> {
        let mut claims = self.claims.clone();
        let seconds = |ms: i64| Value::from(ms as f64 / 1000.0);
        claims.insert("iat".into(), seconds(now_ms));
        claims.insert("exp".into(), seconds(now_ms + self.lifetime_ms));
        let token = format!(
            "{}.{}.",
            B64URL.encode(br#"{"alg":"none"}"#),
            B64URL.encode(Value::Object(claims).to_string())
        );
        let mut message = format!("n,,\u{1}auth=Bearer {token}");
        for (k, v) in &self.extensions {
            message.push_str(&format!("\u{1}{k}={v}"));
        }
        message.push_str("\u{1}\u{1}");
        message.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsecured_logins_make_tokens_the_validator_takes() {
        let options = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let login = UnsecuredLogin::from_options(&options(&[
            ("unsecuredLoginStringClaim_sub", "broker"),
            ("unsecuredLoginListClaim_scope", ",kafka,admin"),
            ("unsecuredLoginNumberClaim_n", "7"),
            ("unsecuredLoginLifetimeSeconds", "60"),
            ("unsecuredLoginExtension_traceId", "42"),
        ]))
        .unwrap();
        assert_eq!(login.principal, "broker");
        let now = 1_800_000_000_000;
        let (authzid, token) = parse_client_first(&login.client_first(now)).unwrap();
        assert_eq!(authzid, None);
        let v = Validator {
            required_scope: vec!["kafka".into(), "admin".into()],
            ..Validator::default()
        };
        assert_eq!(
            validate(&v, &token, now + 1000),
            Ok(Token {
                name: "broker".into(),
                expires_ms: now + 60_000
            })
        );
        assert!(validate(&v, &token, now + 60_000).is_err(), "expired");
        let message = String::from_utf8(login.client_first(now)).unwrap();
        assert!(message.ends_with("\u{1}traceId=42\u{1}\u{1}"), "{message}");

        // The principal claim is required; iat and exp are the login's own.
        let err = UnsecuredLogin::from_options(&options(&[])).unwrap_err();
        assert!(err.contains("unsecuredLoginStringClaim_sub"), "{err}");
        let other = UnsecuredLogin::from_options(&options(&[
            ("unsecuredLoginPrincipalClaimName", "who"),
            ("unsecuredLoginStringClaim_who", "b2"),
        ]));
        assert_eq!(other.unwrap().principal, "b2");
        for bad in [
            ("unsecuredLoginNumberClaim_exp", "1"),
            ("unsecuredLoginNumberClaim_n", "many"),
            ("unsecuredLoginLifetimeSeconds", "-1"),
        ] {
            let o = options(&[("unsecuredLoginStringClaim_sub", "b"), bad]);
            assert!(UnsecuredLogin::from_options(&o).is_err(), "{bad:?}");
        }
    }

    fn jws(claims: serde_json::Value) -> String {
        format!(
            "{}.{}.",
            B64URL.encode(br#"{"alg":"none"}"#),
            B64URL.encode(claims.to_string())
        )
    }

    fn first(token: &str) -> Vec<u8> {
        format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
    }

    #[test]
    fn client_first_messages_as_kafka_clients_send_them() {
        let t = jws(serde_json::json!({"sub": "alice", "exp": 2_000_000_000}));
        assert_eq!(parse_client_first(&first(&t)).unwrap(), (None, t.clone()));
        let with = format!("n,a=alice,\u{1}auth=Bearer {t}\u{1}ext=1\u{1}\u{1}");
        assert_eq!(
            parse_client_first(with.as_bytes()).unwrap(),
            (Some("alice".to_string()), t.clone())
        );
        for bad in [
            "".to_string(),
            format!("n,,auth=Bearer {t}"),
            "n,,\u{1}auth=Basic x\u{1}\u{1}".to_string(),
            "n,,\u{1}\u{1}".to_string(),
            format!("p=x,,\u{1}auth=Bearer {t}\u{1}\u{1}"),
        ] {
            assert!(parse_client_first(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn unsecured_tokens_are_checked_as_kafkas_validator_does() {
        let v = Validator::default();
        let now = 1_700_000_000_000;
        let ok = validate(
            &v,
            &jws(serde_json::json!({"sub": "alice", "exp": 1_700_000_060.5, "iat": 1_699_999_990})),
            now,
        );
        assert_eq!(
            ok,
            Ok(Token {
                name: "alice".into(),
                expires_ms: 1_700_000_060_500
            })
        );
        let refused = |claims: serde_json::Value| validate(&v, &jws(claims), now).unwrap_err();
        assert!(
            refused(serde_json::json!({"sub": "a", "exp": 1_699_999_999}))
                .reason
                .contains("expired")
        );
        assert!(refused(serde_json::json!({"sub": "a"}))
            .reason
            .contains("exp"));
        assert!(refused(serde_json::json!({"exp": 1_700_000_060}))
            .reason
            .contains("sub"));
        assert!(refused(
            serde_json::json!({"sub": "a", "exp": 1_700_000_060, "iat": 1_700_000_030})
        )
        .reason
        .contains("future"));
        // Signed tokens, other algorithms, garbage.
        let signed = format!(
            "{}sig",
            jws(serde_json::json!({"sub": "a", "exp": 1_700_000_060}))
        );
        assert!(validate(&v, &signed, now).is_err());
        let hs = format!(
            "{}.{}.",
            B64URL.encode(br#"{"alg":"HS256"}"#),
            B64URL.encode(br#"{"sub":"a","exp":1700000060}"#)
        );
        assert!(validate(&v, &hs, now).is_err());
        assert!(validate(&v, "not-a-token", now).is_err());
        assert_eq!(
            refused(serde_json::json!({"sub": "a", "exp": 1})).challenge(),
            br#"{"status":"invalid_token"}"#.to_vec()
        );
        // Skew and required scopes.
        let lenient = Validator {
            skew_ms: 10_000,
            required_scope: vec!["kafka".into()],
            ..Validator::default()
        };
        let t = jws(serde_json::json!({"sub": "a", "exp": 1_699_999_995, "scope": "read kafka"}));
        assert!(validate(&lenient, &t, now).is_ok());
        let t = jws(serde_json::json!({"sub": "a", "exp": 1_700_000_060, "scope": ["read"]}));
        let e = validate(&lenient, &t, now).unwrap_err();
        assert_eq!(e.status, "insufficient_scope");
        assert_eq!(
            e.challenge(),
            br#"{"scope":"kafka","status":"insufficient_scope"}"#.to_vec()
        );
    }
}
