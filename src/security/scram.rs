//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 and 7677) as Kafka speaks them: the stored
//! credential (salt, StoredKey, ServerKey, iterations), the server's side of one
//! exchange, and the client's side a broker speaks to log in to another. Kafka never sends `e=`: every failure is one error, which the connection turns
//! into SASL_AUTHENTICATION_FAILED.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2};

/// Kafka's bounds on a credential's iterations (`ScramMechanism.minIterations` and
/// AlterUserScramCredentials' limit).
pub const MIN_ITERATIONS: i32 = 4096;
pub const MAX_ITERATIONS: i32 = 16384;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The ScramMechanism of Alter/DescribeUserScramCredentials: 1 and 2.
    pub fn wire(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_wire(v: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.wire() == v)
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Mechanism::Sha256 => hmac::HMAC_SHA256,
            Mechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::Sha256 => &digest::SHA256,
            Mechanism::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Mechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data)
            .as_ref()
            .to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }

    /// Hi(password, salt, i) of RFC 5802.
    pub fn salted_password(self, password: &str, salt: &[u8], iterations: i32) -> Vec<u8> {
        let mut out = vec![0u8; self.digest().output_len()];
        let i = std::num::NonZeroU32::new(iterations.max(1) as u32).expect("at least 1");
        pbkdf2::derive(self.pbkdf2(), i, salt, password.as_bytes(), &mut out);
        out
    }

    /// What the broker keeps of a password: never the password itself.
    pub fn credential(self, salt: &[u8], salted_password: &[u8], iterations: i32) -> Credential {
        let client_key = self.mac(salted_password, b"Client Key");
        Credential {
            salt: salt.to_vec(),
            stored_key: self.hash(&client_key),
            server_key: self.mac(salted_password, b"Server Key"),
            iterations,
        }
    }
}

/// A user's stored SCRAM credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// Why an exchange failed (for the log; the client only learns that it failed).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ScramError(pub String);

fn bad(why: &str) -> ScramError {
    ScramError(why.to_string())
}

/// The client's first message, parsed.
#[derive(Debug, Clone)]
pub struct ClientFirst {
    pub username: String,
    pub nonce: String,
    /// The message without its GS2 header, part of the AuthMessage.
    pub bare: String,
    /// The GS2 header, whose base64 the client-final `c=` must be.
    gs2_header: String,
}

/// Parses `n,[a=authzid],n=user,r=nonce[,ext...]`. Channel binding is not offered, so
/// only the `n` GS2 flag is accepted; an authzid must name the user itself.
pub fn parse_client_first(msg: &[u8]) -> Result<ClientFirst, ScramError> {
    let msg = std::str::from_utf8(msg).map_err(|_| bad("client-first is not UTF-8"))?;
    let mut parts = msg.splitn(3, ',');
    let flag = parts.next().unwrap_or_default();
    let authzid = parts
        .next()
        .ok_or_else(|| bad("client-first has no GS2 header"))?;
    let bare = parts
        .next()
        .ok_or_else(|| bad("client-first has no bare part"))?;
    if flag != "n" {
        return Err(bad("channel binding is not supported"));
    }
    let mut username = None;
    let mut nonce = None;
    for attr in bare.split(',') {
        if let Some(u) = attr.strip_prefix("n=") {
            username = Some(unescape_name(u)?);
        } else if let Some(r) = attr.strip_prefix("r=") {
            nonce = Some(r.to_string());
        } else if attr.starts_with("m=") {
            return Err(bad("mandatory extensions are not supported"));
        }
    }
    let username = username.ok_or_else(|| bad("client-first names no user"))?;
    let nonce = nonce
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("client-first has no nonce"))?;
    if let Some(a) = authzid.strip_prefix("a=") {
        if unescape_name(a)? != username {
            return Err(bad("authorization id differs from the user"));
        }
    } else if !authzid.is_empty() {
        return Err(bad("bad GS2 header"));
    }
    Ok(ClientFirst {
        username,
        nonce,
        bare: bare.to_string(),
        gs2_header: format!("{flag},{authzid},"),
    })
}

/// A saslname: `=2C` is `,` and `=3D` is `=`; any other `=` is an error.
fn unescape_name(s: &str) -> Result<String, ScramError> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(bad("bad escape in user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The server's first message for `client` with `credential`; `server_nonce` is fresh
/// random printable text.
pub fn server_first(client: &ClientFirst, credential: &Credential, server_nonce: &str) -> String {
    format!(
        "r={}{},s={},i={}",
        client.nonce,
        server_nonce,
        B64.encode(&credential.salt),
        credential.iterations
    )
}

/// Checks the client's final message against the stored credential; returns the server's
/// final message (`v=` and the server signature).
pub fn verify_client_final(
    mechanism: Mechanism,
    client: &ClientFirst,
    server_first: &str,
    credential: &Credential,
    msg: &[u8],
) -> Result<String, ScramError> {
    let msg = std::str::from_utf8(msg).map_err(|_| bad("client-final is not UTF-8"))?;
    let (without_proof, proof) = msg
        .rsplit_once(",p=")
        .ok_or_else(|| bad("client-final has no proof"))?;
    let mut binding = None;
    let mut nonce = None;
    for attr in without_proof.split(',') {
        if let Some(c) = attr.strip_prefix("c=") {
            binding = Some(c);
        } else if let Some(r) = attr.strip_prefix("r=") {
            nonce = Some(r);
        }
    }
    if binding != Some(B64.encode(&client.gs2_header).as_str()) {
        return Err(bad("channel binding does not match the GS2 header"));
    }
    let expected_nonce = server_first
        .strip_prefix("r=")
        .and_then(|r| r.split(',').next())
        .unwrap_or_default();
    // Kafka checks only that the client's nonce ends with the server-first one
    // (ScramSaslServer): librdkafka before 2.1 sends its own nonce in front of it again.
    if !nonce.is_some_and(|n| n.ends_with(expected_nonce)) {
        return Err(bad("nonce does not match"));
    }
    let proof = B64.decode(proof).map_err(|_| bad("proof is not base64"))?;
    let auth_message = format!("{},{server_first},{without_proof}", client.bare);
    let client_signature = mechanism.mac(&credential.stored_key, auth_message.as_bytes());
    if proof.len() != client_signature.len() {
        return Err(bad("proof has the wrong length"));
    }
    let client_key: Vec<u8> = proof
        .iter()
        .zip(&client_signature)
        .map(|(p, s)| p ^ s)
        .collect();
    if !constant_time_eq(&mechanism.hash(&client_key), &credential.stored_key) {
        return Err(bad("wrong password"));
    }
    let server_signature = mechanism.mac(&credential.server_key, auth_message.as_bytes());
    Ok(format!("v={}", B64.encode(server_signature)))
}

/// A fresh nonce: 18 random bytes in base64 (never a comma).
pub fn nonce() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 18];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source");
    B64.encode(bytes)
}

/// The client's side of one exchange, as a broker logs in to another: [`Client::first`],
/// then [`Client::answer`] the server-first message, then [`Client::check`] the server-final.
pub struct Client {
    mechanism: Mechanism,
    password: String,
    nonce: String,
    bare: String,
    /// The server signature the server-final must carry, once answered.
    expected: Option<Vec<u8>>,
}

impl Client {
    /// Begins an exchange for `username` with a fresh `nonce` (printable, no comma).
    pub fn new(mechanism: Mechanism, username: &str, password: &str, nonce: &str) -> Client {
        let name = username.replace('=', "=3D").replace(',', "=2C");
        Client {
            mechanism,
            password: password.to_string(),
            nonce: nonce.to_string(),
            bare: format!("n={name},r={nonce}"),
            expected: None,
        }
    }

    /// The client-first message.
    pub fn first(&self) -> String {
        format!("n,,{}", self.bare)
    }

    /// The client-final message answering `server_first`, whose nonce must extend ours and
    /// whose iterations must be within Kafka's bounds.
    pub fn answer(&mut self, server_first: &[u8]) -> Result<String, ScramError> {
        let (m, password) = (self.mechanism, self.password.clone());
        self.answer_salted(server_first, &|salt, i| {
            m.salted_password(&password, salt, i)
        })
    }

    /// [`Client::answer`] with the salted password from `salted(salt, iterations)`, which
    /// may keep it: PBKDF2 is the costly part, and a salt and count change only when the
    /// credential does.
    pub fn answer_salted(
        &mut self,
        server_first: &[u8],
        salted: &dyn Fn(&[u8], i32) -> Vec<u8>,
    ) -> Result<String, ScramError> {
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| bad("server-first is not UTF-8"))?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in server_first.split(',') {
            if let Some(r) = attr.strip_prefix("r=") {
                nonce = Some(r);
            } else if let Some(s) = attr.strip_prefix("s=") {
                salt = Some(B64.decode(s).map_err(|_| bad("salt is not base64"))?);
            } else if let Some(i) = attr.strip_prefix("i=") {
                iterations = i.parse::<i32>().ok();
            } else if attr.starts_with("e=") {
                return Err(bad(&format!("the server refused: {attr}")));
            }
        }
        let nonce = nonce
            .filter(|n| n.starts_with(&self.nonce) && n.len() > self.nonce.len())
            .ok_or_else(|| bad("server-first nonce does not extend the client's"))?;
        let salt = salt.ok_or_else(|| bad("server-first has no salt"))?;
        let iterations = iterations
            .filter(|i| (MIN_ITERATIONS..=MAX_ITERATIONS).contains(i))
            .ok_or_else(|| bad("server-first iterations are missing or out of bounds"))?;
        let m = self.mechanism;
        let salted = salted(&salt, iterations);
        let client_key = m.mac(&salted, b"Client Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.bare);
        let signature = m.mac(&m.hash(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = m.mac(&salted, b"Server Key");
        self.expected = Some(m.mac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server-final message: the server knew the credential too.
    pub fn check(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let text =
            std::str::from_utf8(server_final).map_err(|_| bad("server-final is not UTF-8"))?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(bad(&format!("the server refused: {e}")));
        }
        let got = text
            .strip_prefix("v=")
            .and_then(|v| B64.decode(v).ok())
            .ok_or_else(|| bad("server-final has no signature"))?;
        match &self.expected {
            Some(want) if constant_time_eq(want, &got) => Ok(()),
            _ => Err(bad("the server's signature is wrong")),
        }
    }
}

/// Equality that takes as long whatever the first difference.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, end to end (user "user", password "pencil").
    #[test]
    fn rfc7677_example() {
        let m = Mechanism::Sha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = m.salted_password("pencil", &salt, 4096);
        let credential = m.credential(&salt, &salted, 4096);
        let client = parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        assert_eq!(client.username, "user");
        let first = server_first(&client, &credential, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
        assert_eq!(
            first,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let final_msg = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        let server_final =
            verify_client_final(m, &client, &first, &credential, final_msg.as_bytes()).unwrap();
        assert_eq!(
            server_final,
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        // A wrong proof, a changed nonce: refused.
        let wrong = final_msg.replace("p=dHzb", "p=eHzb");
        assert!(verify_client_final(m, &client, &first, &credential, wrong.as_bytes()).is_err());
        // librdkafka 2.0's client-final: its own nonce again in front (Kafka accepts it).
        // The proof is then over that message, so it is checked against it.
        let doubled = final_msg.replace("r=rOpr", "r=rOprNGfwEbeRWgbNEkqOrOpr");
        assert!(matches!(
            verify_client_final(m, &client, &first, &credential, doubled.as_bytes()),
            Err(ScramError(e)) if e == "wrong password"
        ));
        let other_nonce = final_msg.replace("k0,p=", "k1,p=");
        assert!(
            verify_client_final(m, &client, &first, &credential, other_nonce.as_bytes()).is_err()
        );
    }

    /// The client's side of RFC 7677's example, and against the server's side.
    #[test]
    fn the_client_side_speaks_rfc7677() {
        let m = Mechanism::Sha256;
        let mut c = Client::new(m, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(c.first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let first =
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        assert_eq!(
            c.answer(first.as_bytes()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.check(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(c
            .check(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .is_err());
        assert!(c.check(b"e=invalid-proof").is_err());
        // A server nonce that does not extend ours, too few iterations: refused.
        let mut c = Client::new(m, "user", "pencil", "abc");
        assert!(c
            .answer(b"r=xyzdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .is_err());
        assert!(c
            .answer(b"r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=10")
            .is_err());
        // SCRAM-SHA-512 against the server's side, a name that needs escaping.
        let m = Mechanism::Sha512;
        let salt = b"some salt".to_vec();
        let credential = m.credential(&salt, &m.salted_password("secret", &salt, 8192), 8192);
        let mut c = Client::new(m, "a,b=c", "secret", "clientnonce");
        let parsed = parse_client_first(c.first().as_bytes()).unwrap();
        assert_eq!(parsed.username, "a,b=c");
        let first = server_first(&parsed, &credential, "servernonce");
        let last = c.answer(first.as_bytes()).unwrap();
        let server_final = verify_client_final(m, &parsed, &first, &credential, last.as_bytes());
        c.check(server_final.unwrap().as_bytes()).unwrap();
        let mut wrong = Client::new(m, "a,b=c", "not it", "clientnonce");
        let last = wrong.answer(first.as_bytes()).unwrap();
        assert!(verify_client_final(m, &parsed, &first, &credential, last.as_bytes()).is_err());
    }

    #[test]
    fn client_first_messages() {
        let c = parse_client_first(b"n,a=a=2Cb,n=a=2Cb,r=xyz").unwrap();
        assert_eq!(c.username, "a,b");
        assert!(parse_client_first(b"y,,n=u,r=x").is_err());
        assert!(parse_client_first(b"p=tls-unique,,n=u,r=x").is_err());
        assert!(parse_client_first(b"n,a=other,n=u,r=x").is_err());
        assert!(parse_client_first(b"n,,n=u").is_err());
        assert!(parse_client_first(b"n,,n=a=zz,r=x").is_err());
        assert!(parse_client_first(b"garbage").is_err());
        assert!(parse_client_first(&[0xff, 0xfe]).is_err());
    }
}
