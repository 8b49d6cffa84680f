//! Client quotas as the metadata log holds them (KIP-546's AlterClientQuotas and
//! DescribeClientQuotas, which `kafka-configs --entity-type users|clients|ips` sends): an
//! entity is a user, a client id, a user and client id together, or an address, each name
//! possibly the default; each has rates by key. What Kafka's ClientQuotaControlManager
//! decides and its ClientQuotasImage answers, checked the same way; applying them to
//! traffic is the brokers' business.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use serde::{Deserialize, Serialize};

pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// An entity: entity type → name, `None` for the type's default (`--entity-default`).
pub type Entity = BTreeMap<String, Option<String>>;

/// A quota's value. Kafka's are doubles; only finite ones are stored, so the log and its
/// JSON snapshots never hold a NaN.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Value(pub f64);

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Value {}

/// One entity's quotas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    pub entity: Entity,
    pub values: BTreeMap<String, Value>,
}

/// Every entity's quotas, under [`key`] of the entity (JSON maps need text keys).
pub type Table = BTreeMap<String, Quotas>;

/// The table's key for `entity`: its JSON, one text per entity.
pub fn key(entity: &Entity) -> String {
    serde_json::to_string(entity).expect("a map of strings")
}

/// One entry of AlterClientQuotas as the client sent it: the entity's (type, name) pairs
/// and (key, value) operations, `None` to remove.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alteration {
    pub entity: Vec<(String, Option<String>)>,
    pub ops: Vec<(String, Option<f64>)>,
}

/// The answer for one entry, in request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterResult {
    pub entity: Vec<(String, Option<String>)>,
    pub error: i16,
    pub message: Option<String>,
}

/// One change a decision makes: an entity's quota set, or removed (`None`).
pub type Change = (Entity, String, Option<Value>);

/// How a key's value must look (Kafka's QuotaConfigs types).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Long,
    Double,
    Int,
}

fn kind(entity: &Entity, key: &str) -> Option<Kind> {
    match entity.contains_key(IP) {
        true => (key == "connection_creation_rate").then_some(Kind::Int),
        false => match key {
            "producer_byte_rate" | "consumer_byte_rate" => Some(Kind::Long),
            "request_percentage" | "controller_mutation_rate" => Some(Kind::Double),
            _ => None,
        },
    }
}

/// Kafka's checks of an entity: known types, each once, no empty name, and one of the
/// combinations quotas apply to (user, client id, both, or an address alone).
fn check_entity(pairs: &[(String, Option<String>)]) -> Result<Entity, String> {
    if pairs.is_empty() {
        return Err("Invalid empty client quota entity".into());
    }
    let mut entity = Entity::new();
    for (t, name) in pairs {
        if entity.contains_key(t) {
            return Err(format!(
                "Invalid empty client quota entity, duplicate entity entry {t}"
            ));
        }
        if ![USER, CLIENT_ID, IP].contains(&t.as_str()) {
            return Err(format!("Unhandled client quota entity type: {t}"));
        }
        if name.as_deref() == Some("") {
            return Err(format!("Empty {t} not supported"));
        }
        entity.insert(t.clone(), name.clone());
    }
    if entity.contains_key(IP) {
        if entity.len() > 1 {
            return Err("Invalid empty client quota entity".into());
        }
        // Kafka resolves a host name here; the controller decides without the network,
        // so an address must be written as one.
        if let Some(Some(ip)) = entity.get(IP) {
            if ip.parse::<std::net::IpAddr>().is_err() {
                return Err(format!("{ip} is not a valid IP or resolvable host."));
            }
        }
    }
    Ok(entity)
}

fn check_value(entity: &Entity, key: &str, value: f64) -> Result<(), String> {
    let kind = kind(entity, key).ok_or_else(|| format!("Invalid configuration key {key}"))?;
    if !value.is_finite() {
        return Err(format!("Configuration {key} must be a finite number"));
    }
    let whole = (value - value.round()).abs() <= 1e-6;
    match kind {
        Kind::Double => Ok(()),
        Kind::Long if whole => Ok(()),
        Kind::Long => Err(format!("Configuration {key} must be a Long value")),
        Kind::Int if whole && (0.0..=i32::MAX as f64).contains(&value) => Ok(()),
        Kind::Int => Err(format!(
            "Configuration {key} must be a whole number from 0 to {}",
            i32::MAX
        )),
    }
}

/// AlterClientQuotas as Kafka's controller decides it: each entry stands alone; an entry
/// with any bad part changes nothing. Returns the answers and, for the accepted entries,
/// the changes (only values that differ, removals only of values set); `(entity, key,
/// None)` removes.
pub fn alter(table: &Table, alterations: &[Alteration]) -> (Vec<AlterResult>, Vec<Change>) {
    let mut results = Vec::with_capacity(alterations.len());
    let mut changes = Vec::new();
    let mut seen: Vec<Entity> = Vec::new();
    for a in alterations {
        let decided = (|| {
            let entity = check_entity(&a.entity)?;
            if seen.contains(&entity) {
                return Err(format!("Ignoring duplicate entity {entity:?}"));
            }
            seen.push(entity.clone());
            let mut ops: BTreeMap<&str, Option<f64>> = BTreeMap::new();
            for (k, v) in &a.ops {
                if ops.insert(k, *v).is_some() {
                    return Err(format!(
                        "Duplicate quota key {k} not updating quota for this entity {entity:?}"
                    ));
                }
            }
            let current = table.get(&key(&entity)).map(|q| &q.values);
            let mut mine = Vec::new();
            for (k, v) in ops {
                let now = current.and_then(|c| c.get(k));
                match v {
                    None if now.is_some() => mine.push((entity.clone(), k.to_string(), None)),
                    None => {}
                    Some(v) => {
                        check_value(&entity, k, v)?;
                        if now != Some(&Value(v)) {
                            mine.push((entity.clone(), k.to_string(), Some(Value(v))));
                        }
                    }
                }
            }
            Ok(mine)
        })();
        let (error, message) = match decided {
            Ok(mine) => {
                changes.extend(mine);
                (0, None)
            }
            Err(message) => (ResponseError::InvalidRequest.code(), Some(message)),
        };
        results.push(AlterResult {
            entity: a.entity.clone(),
            error,
            message,
        });
    }
    (results, changes)
}

/// Applies one change to the table.
pub fn apply(table: &mut Table, entity: &Entity, quota: &str, value: Option<Value>) {
    let k = key(entity);
    match value {
        Some(v) => {
            let q = table.entry(k).or_insert_with(|| Quotas {
                entity: entity.clone(),
                values: BTreeMap::new(),
            });
            q.values.insert(quota.to_string(), v);
        }
        None => {
            if let Some(q) = table.get_mut(&k) {
                q.values.remove(quota);
                if q.values.is_empty() {
                    table.remove(&k);
                }
            }
        }
    }
}

/// One component of a DescribeClientQuotas filter: (entity type, match type, match).
pub type Component = (String, i8, Option<String>);

/// DescribeClientQuotas as Kafka's ClientQuotasImage answers it: the entities matching
/// every component (0: that name, 1: the default, 2: any name), with `strict` only those
/// with no other entity type; no component matches everything unless strict. A bad
/// filter gets Kafka's error and message.
pub fn describe<'a>(
    table: &'a Table,
    components: &[Component],
    strict: bool,
) -> Result<Vec<&'a Quotas>, (ResponseError, String)> {
    let invalid = |m: String| (ResponseError::InvalidRequest, m);
    // entity type -> Some(name or default) for an exact match, None for any name
    let mut wanted: BTreeMap<&str, Option<Option<&str>>> = BTreeMap::new();
    for (t, match_type, name) in components {
        if t.is_empty() {
            return Err(invalid("Invalid empty entity type.".into()));
        }
        if wanted.contains_key(t.as_str()) {
            return Err(invalid(format!(
                "Entity type {t} cannot appear more than once in the filter."
            )));
        }
        if ![USER, CLIENT_ID, IP].contains(&t.as_str()) {
            return Err((
                ResponseError::UnsupportedVersion,
                format!("Unsupported entity type {t}"),
            ));
        }
        let one =
            match (match_type, name) {
                (0, Some(n)) => Some(Some(n.as_str())),
                (0, None) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                    ))
                }
                (1, None) => Some(None),
                (1, Some(_)) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                            .into(),
                    ))
                }
                (2, None) => None,
                (2, Some(_)) => return Err(invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                )),
                (other, _) => return Err(invalid(format!("Unknown match type {other}"))),
            };
        wanted.insert(t.as_str(), one);
    }
    if wanted.contains_key(IP) && (wanted.contains_key(USER) || wanted.contains_key(CLIENT_ID)) {
        return Err(invalid(
            "Invalid entity filter component combination. IP filter component should not be \
             used with user or clientId filter component."
                .into(),
        ));
    }
    if wanted.is_empty() && strict {
        return Ok(Vec::new());
    }
    Ok(table
        .values()
        .filter(|q| {
            wanted.iter().all(|(t, one)| match (q.entity.get(*t), one) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(name), Some(want)) => name.as_deref() == *want,
            }) && (!strict || q.entity.len() == wanted.len())
        })
        .collect())
}

/// The quota a client is held to for `quota` (a key such as `producer_byte_rate`) and
/// whose usage counts against it, as Kafka's default quota callback decides: the first of
/// user and client id, user and default client id, user, default user and client id,
/// default user and default client id, default user, client id, default client id that
/// sets `quota`. Clients share a usage when they share its tags: the user alone (levels
/// 3 and 6), the client id alone (7 and 8), or both. `None`: no quota applies.
pub fn applying(table: &Table, user: &str, client_id: &str, quota: &str) -> Option<Applied> {
    use Part::{Absent, Default, Named};
    const LEVELS: [(Part, Part); 8] = [
        (Named, Named),
        (Named, Default),
        (Named, Absent),
        (Default, Named),
        (Default, Default),
        (Default, Absent),
        (Absent, Named),
        (Absent, Default),
    ];
    LEVELS.into_iter().find_map(|(u, c)| {
        let mut entity = Entity::new();
        for (t, part, name) in [(USER, u, user), (CLIENT_ID, c, client_id)] {
            match part {
                Named => entity.insert(t.to_string(), Some(name.to_string())),
                Default => entity.insert(t.to_string(), None),
                Absent => None,
            };
        }
        let bound = table.get(&key(&entity))?.values.get(quota)?.0;
        let tag = |part, name: &str| if part == Absent { "" } else { name }.to_string();
        Some(Applied {
            bound,
            user: tag(u, user),
            client_id: tag(c, client_id),
        })
    })
}

/// The `connection_creation_rate` new connections from `ip` are held to: the address's
/// own (its entity named by any spelling of the address), else the default address's.
pub fn ip_connection_rate(table: &Table, ip: std::net::IpAddr) -> Option<f64> {
    const KEY: &str = "connection_creation_rate";
    let ip = ip.to_canonical();
    let named = table.values().find_map(|q| {
        let name = q.entity.get(IP)?.as_deref()?;
        let same = name.parse::<std::net::IpAddr>().ok()?.to_canonical() == ip;
        same.then(|| q.values.get(KEY)).flatten()
    });
    let default = || {
        let entity = Entity::from([(IP.to_string(), None)]);
        table.get(&key(&entity))?.values.get(KEY).copied()
    };
    named.copied().or_else(default).map(|v| v.0)
}

/// One part of an entity [`applying`] looks for: the client's name, the default, or none.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Named,
    Default,
    Absent,
}

/// A quota that applies to a client ([`applying`]): its bound and the tags of the usage
/// it is measured on (empty when that part is shared by every name).
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub bound: f64,
    pub user: String,
    pub client_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        p.iter()
            .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
            .collect()
    }

    fn alteration(p: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> Alteration {
        Alteration {
            entity: pairs(p),
            ops: ops.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    fn altered(table: &mut Table, a: &[Alteration]) -> Vec<i16> {
        let (results, changes) = alter(table, a);
        for (e, k, v) in changes {
            apply(table, &e, &k, v);
        }
        results.iter().map(|r| r.error).collect()
    }

    #[test]
    fn alterations_are_checked_per_entity_as_kafka_checks_them() {
        let mut t = Table::new();
        let alice = [(USER, Some("alice"))];
        let codes = altered(
            &mut t,
            &[
                alteration(&alice, &[("producer_byte_rate", Some(1024.0))]),
                alteration(
                    &[(USER, None), (CLIENT_ID, Some("app"))],
                    &[("request_percentage", Some(12.5))],
                ),
                alteration(
                    &[(IP, Some("10.0.0.1"))],
                    &[("connection_creation_rate", Some(5.0))],
                ),
                // Each of these is refused whole.
                alteration(&[], &[("producer_byte_rate", Some(1.0))]),
                alteration(
                    &[("group", Some("g"))],
                    &[("producer_byte_rate", Some(1.0))],
                ),
                alteration(&[(USER, Some(""))], &[("producer_byte_rate", Some(1.0))]),
                alteration(
                    &[(IP, Some("not an ip"))],
                    &[("connection_creation_rate", Some(1.0))],
                ),
                alteration(
                    &[(IP, None), (USER, None)],
                    &[("connection_creation_rate", Some(1.0))],
                ),
                alteration(&[(USER, Some("bob"))], &[("producer_byte_rate", Some(1.5))]),
                alteration(&[(USER, Some("bob"))], &[("consumer_byte_rate", Some(1.0))]),
                alteration(
                    &[(USER, Some("carol"))],
                    &[
                        ("consumer_byte_rate", Some(1.0)),
                        ("no_such_rate", Some(1.0)),
                    ],
                ),
                alteration(
                    &[(USER, Some("dave"))],
                    &[("request_percentage", Some(f64::NAN))],
                ),
                alteration(&[(IP, None)], &[("connection_creation_rate", Some(-1.0))]),
                alteration(
                    &[(USER, Some("erin"))],
                    &[
                        ("producer_byte_rate", Some(1.0)),
                        ("producer_byte_rate", None),
                    ],
                ),
            ],
        );
        assert_eq!(codes[..3], [0, 0, 0]);
        // "bob" twice: the first (a bad value) still claims the entity.
        assert!(codes[3..].iter().all(|&c| c == 42), "{codes:?}");
        assert_eq!(t.len(), 3);
        let q = &t[&key(&check_entity(&pairs(&alice)).unwrap())];
        assert_eq!(q.values["producer_byte_rate"], Value(1024.0));

        // Removing a value set, and one never set, and changing nothing: one change only.
        let (results, changes) = alter(
            &t,
            &[alteration(
                &alice,
                &[("producer_byte_rate", None), ("consumer_byte_rate", None)],
            )],
        );
        assert_eq!(results[0].error, 0);
        assert_eq!(changes.len(), 1);
        let (_, same) = alter(
            &t,
            &[alteration(&alice, &[("producer_byte_rate", Some(1024.0))])],
        );
        assert!(same.is_empty());
        assert_eq!(
            altered(
                &mut t,
                &[alteration(&alice, &[("producer_byte_rate", None)])]
            ),
            [0]
        );
        assert_eq!(t.len(), 2, "an entity with no values left is gone");
    }

    /// An address's own connection rate, however the address was spelt, then the default
    /// address's; none without either.
    #[test]
    fn connection_rates_by_address() {
        let mut t = Table::new();
        let rate = |t: &Table, ip: &str| ip_connection_rate(t, ip.parse().unwrap());
        assert_eq!(rate(&t, "10.0.0.1"), None);
        let own = alteration(
            &[(IP, Some("::1"))],
            &[("connection_creation_rate", Some(5.0))],
        );
        assert_eq!(altered(&mut t, &[own]), [0]);
        assert_eq!(rate(&t, "0:0:0:0:0:0:0:1"), Some(5.0));
        assert_eq!(rate(&t, "10.0.0.1"), None);
        let default = alteration(&[(IP, None)], &[("connection_creation_rate", Some(2.0))]);
        assert_eq!(altered(&mut t, &[default]), [0]);
        assert_eq!(rate(&t, "10.0.0.1"), Some(2.0));
        assert_eq!(rate(&t, "::ffff:10.0.0.1"), Some(2.0));
        assert_eq!(rate(&t, "::1"), Some(5.0));
    }

    #[test]
    fn describe_filters_as_kafkas_image() {
        let mut t = Table::new();
        let set = |t: &mut Table, p: &[(&str, Option<&str>)]| {
            let k = match p[0].0 {
                IP => "connection_creation_rate",
                _ => "consumer_byte_rate",
            };
            assert_eq!(altered(t, &[alteration(p, &[(k, Some(100.0))])]), [0]);
        };
        set(&mut t, &[(USER, Some("alice"))]);
        set(&mut t, &[(USER, None)]);
        set(&mut t, &[(USER, Some("alice")), (CLIENT_ID, Some("app"))]);
        set(&mut t, &[(CLIENT_ID, Some("app"))]);
        set(&mut t, &[(IP, Some("10.0.0.1"))]);
        let c = |t: &str, m: i8, n: Option<&str>| (t.to_string(), m, n.map(str::to_string));
        let count = |components: &[Component], strict: bool| {
            describe(&t, components, strict).map(|v| v.len())
        };
        assert_eq!(count(&[], false), Ok(5));
        assert_eq!(count(&[], true), Ok(0));
        assert_eq!(count(&[c(USER, 0, Some("alice"))], false), Ok(2));
        assert_eq!(count(&[c(USER, 0, Some("alice"))], true), Ok(1));
        assert_eq!(count(&[c(USER, 1, None)], false), Ok(1));
        assert_eq!(count(&[c(USER, 2, None)], false), Ok(3));
        assert_eq!(
            count(&[c(USER, 2, None), c(CLIENT_ID, 2, None)], true),
            Ok(1)
        );
        assert_eq!(count(&[c(CLIENT_ID, 0, Some("app"))], true), Ok(1));
        assert_eq!(count(&[c(IP, 2, None)], false), Ok(1));
        let code = |components: &[Component]| describe(&t, components, false).unwrap_err().0;
        assert_eq!(code(&[c("", 2, None)]), ResponseError::InvalidRequest);
        assert_eq!(
            code(&[c(USER, 2, None), c(USER, 1, None)]),
            ResponseError::InvalidRequest
        );
        assert_eq!(
            code(&[c("group", 2, None)]),
            ResponseError::UnsupportedVersion
        );
        assert_eq!(code(&[c(USER, 0, None)]), ResponseError::InvalidRequest);
        assert_eq!(
            code(&[c(USER, 1, Some("a"))]),
            ResponseError::InvalidRequest
        );
        assert_eq!(
            code(&[c(USER, 2, Some("a"))]),
            ResponseError::InvalidRequest
        );
        assert_eq!(code(&[c(USER, 3, None)]), ResponseError::InvalidRequest);
        assert_eq!(
            code(&[c(IP, 2, None), c(USER, 2, None)]),
            ResponseError::InvalidRequest
        );
    }

    #[test]
    fn the_first_of_the_eight_levels_applies_with_its_tags() {
        let mut t = Table::new();
        let set = |t: &mut Table, e: &[(&str, Option<&str>)], v: f64| {
            let entity: Entity = e
                .iter()
                .map(|(k, n)| (k.to_string(), n.map(str::to_string)))
                .collect();
            apply(t, &entity, "producer_byte_rate", Some(Value(v)));
        };
        let got = |t: &Table, u: &str, c: &str| {
            applying(t, u, c, "producer_byte_rate").map(|a| (a.bound, a.user, a.client_id))
        };
        assert_eq!(got(&t, "alice", "app"), None);
        set(&mut t, &[(CLIENT_ID, None)], 8.0);
        assert_eq!(
            got(&t, "alice", "app"),
            Some((8.0, "".into(), "app".into()))
        );
        set(&mut t, &[(CLIENT_ID, Some("app"))], 7.0);
        assert_eq!(
            got(&t, "alice", "app"),
            Some((7.0, "".into(), "app".into()))
        );
        assert_eq!(
            got(&t, "alice", "other"),
            Some((8.0, "".into(), "other".into()))
        );
        set(&mut t, &[(USER, None)], 6.0);
        assert_eq!(
            got(&t, "alice", "app"),
            Some((6.0, "alice".into(), "".into()))
        );
        set(&mut t, &[(USER, None), (CLIENT_ID, None)], 5.0);
        assert_eq!(
            got(&t, "alice", "app"),
            Some((5.0, "alice".into(), "app".into()))
        );
        set(&mut t, &[(USER, None), (CLIENT_ID, Some("app"))], 4.0);
        assert_eq!(
            got(&t, "alice", "app"),
            Some((4.0, "alice".into(), "app".into()))
        );
        set(&mut t, &[(USER, Some("alice"))], 3.0);
        assert_eq!(
            got(&t, "alice", "app"),
            Some((3.0, "alice".into(), "".into()))
        );
        assert_eq!(
            got(&t, "bob", "app"),
            Some((4.0, "bob".into(), "app".into()))
        );
        set(&mut t, &[(USER, Some("alice")), (CLIENT_ID, None)], 2.0);
        assert_eq!(
            got(&t, "alice", "app"),
            Some((2.0, "alice".into(), "app".into()))
        );
        set(
            &mut t,
            &[(USER, Some("alice")), (CLIENT_ID, Some("app"))],
            1.0,
        );
        assert_eq!(
            got(&t, "alice", "app"),
            Some((1.0, "alice".into(), "app".into()))
        );
        // Another key is looked up on its own: nothing sets consumer_byte_rate.
        assert_eq!(applying(&t, "alice", "app", "consumer_byte_rate"), None);
    }
}
