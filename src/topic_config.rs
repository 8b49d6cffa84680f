//! Topic-level configs: the keys Kafka defines, their defaults (some inherited from broker
//! settings), validation of values, and the effective settings the log uses.
//!
//! DescribeConfigs, CreateTopics and (Incremental)AlterConfigs all go through this table, so
//! a key is described, validated and applied the same way everywhere.

use std::collections::BTreeMap;

// Broker and topic configs share these; they live with the broker table, the lower layer.
pub use crate::config::keys::{Kind, Source};
use crate::config::Config;
use crate::error::{Error, Result};

pub struct Key {
    pub name: &'static str,
    pub kind: Kind,
    /// The broker setting that supplies the default, if any.
    pub broker_key: Option<&'static str>,
    pub default: &'static str,
    /// Allowed values for enumerations.
    pub choices: &'static [&'static str],
    pub min: Option<f64>,
}

const fn key(name: &'static str, kind: Kind, default: &'static str) -> Key {
    Key {
        name,
        kind,
        broker_key: None,
        default,
        choices: &[],
        min: None,
    }
}

const LONG_MAX: &str = "9223372036854775807";

pub static KEYS: &[Key] = &[
    Key {
        broker_key: Some("log.cleanup.policy"),
        choices: &["delete", "compact", "delete,compact", "compact,delete"],
        ..key("cleanup.policy", Kind::List, "delete")
    },
    Key {
        choices: &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"],
        ..key("compression.type", Kind::String, "producer")
    },
    Key {
        broker_key: Some("log.cleaner.delete.retention.ms"),
        min: Some(0.0),
        ..key("delete.retention.ms", Kind::Long, "86400000")
    },
    Key {
        min: Some(0.0),
        ..key("file.delete.delay.ms", Kind::Long, "60000")
    },
    Key {
        min: Some(1.0),
        ..key("flush.messages", Kind::Long, LONG_MAX)
    },
    Key {
        min: Some(0.0),
        ..key("flush.ms", Kind::Long, LONG_MAX)
    },
    key("follower.replication.throttled.replicas", Kind::List, ""),
    Key {
        min: Some(0.0),
        ..key("index.interval.bytes", Kind::Int, "4096")
    },
    key("leader.replication.throttled.replicas", Kind::List, ""),
    Key {
        min: Some(-2.0),
        ..key("local.retention.bytes", Kind::Long, "-2")
    },
    Key {
        min: Some(-2.0),
        ..key("local.retention.ms", Kind::Long, "-2")
    },
    Key {
        broker_key: Some("log.cleaner.max.compaction.lag.ms"),
        min: Some(1.0),
        ..key("max.compaction.lag.ms", Kind::Long, LONG_MAX)
    },
    Key {
        broker_key: Some("message.max.bytes"),
        min: Some(0.0),
        ..key("max.message.bytes", Kind::Int, "1048588")
    },
    Key {
        min: Some(0.0),
        ..key("message.timestamp.after.max.ms", Kind::Long, "3600000")
    },
    Key {
        min: Some(0.0),
        ..key("message.timestamp.before.max.ms", Kind::Long, LONG_MAX)
    },
    Key {
        choices: &["CreateTime", "LogAppendTime"],
        ..key("message.timestamp.type", Kind::String, "CreateTime")
    },
    Key {
        broker_key: Some("log.cleaner.min.cleanable.ratio"),
        min: Some(0.0),
        ..key("min.cleanable.dirty.ratio", Kind::Double, "0.5")
    },
    Key {
        broker_key: Some("log.cleaner.min.compaction.lag.ms"),
        min: Some(0.0),
        ..key("min.compaction.lag.ms", Kind::Long, "0")
    },
    Key {
        broker_key: Some("min.insync.replicas"),
        min: Some(1.0),
        ..key("min.insync.replicas", Kind::Int, "1")
    },
    key("preallocate", Kind::Boolean, "false"),
    key("remote.storage.enable", Kind::Boolean, "false"),
    Key {
        broker_key: Some("log.retention.bytes"),
        min: Some(-1.0),
        ..key("retention.bytes", Kind::Long, "-1")
    },
    Key {
        broker_key: Some("log.retention.ms"),
        min: Some(-1.0),
        ..key("retention.ms", Kind::Long, "604800000")
    },
    Key {
        broker_key: Some("log.segment.bytes"),
        min: Some(1048576.0),
        ..key("segment.bytes", Kind::Int, "1073741824")
    },
    Key {
        min: Some(4.0),
        ..key("segment.index.bytes", Kind::Int, "10485760")
    },
    Key {
        min: Some(0.0),
        ..key("segment.jitter.ms", Kind::Long, "0")
    },
    Key {
        broker_key: Some("log.roll.ms"),
        min: Some(1.0),
        ..key("segment.ms", Kind::Long, "604800000")
    },
    key("unclean.leader.election.enable", Kind::Boolean, "false"),
];

pub fn lookup(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// The broker-derived default of a key and whether it was set explicitly in the broker config.
pub fn default_value(k: &Key, broker: &Config) -> (String, Source) {
    // The broker table gives the broker key's value in force and whether it was set, its
    // synonyms included (log.retention.hours sets log.retention.ms).
    match k.broker_key.and_then(crate::config::keys::lookup) {
        Some(b) => {
            let d = crate::config::keys::describe(b, broker);
            (d.value.unwrap_or_else(|| k.default.to_string()), d.source)
        }
        None => (k.default.to_string(), Source::Default),
    }
}

/// Checks one topic config; the error names the key and says why.
pub fn validate(name: &str, value: &str) -> Result<()> {
    let k =
        lookup(name).ok_or_else(|| Error::InvalidConfig(format!("unknown topic config {name}")))?;
    let bad =
        |why: &str| Error::InvalidConfig(format!("invalid value '{value}' for {name}: {why}"));
    match k.kind {
        Kind::Boolean => {
            if !value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false") {
                return Err(bad("expected true or false"));
            }
        }
        Kind::Short | Kind::Int | Kind::Long => {
            let n: i64 = value
                .trim()
                .parse()
                .map_err(|_| bad("expected a whole number"))?;
            if k.kind == Kind::Int && i32::try_from(n).is_err() {
                return Err(bad("out of range for an int"));
            }
            if k.kind == Kind::Short && i16::try_from(n).is_err() {
                return Err(bad("out of range for a short"));
            }
            if let Some(min) = k.min {
                if (n as f64) < min {
                    return Err(bad(&format!("must be at least {min}")));
                }
            }
        }
        Kind::Double => {
            let n: f64 = value.trim().parse().map_err(|_| bad("expected a number"))?;
            if k.min.is_some_and(|m| n < m) || n > 1.0 {
                return Err(bad("must be between 0 and 1"));
            }
        }
        Kind::String | Kind::List | Kind::Password => {
            if !k.choices.is_empty() {
                let normalized: String = value
                    .split(',')
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(",");
                if !k
                    .choices
                    .iter()
                    .any(|c| c.eq_ignore_ascii_case(&normalized))
                {
                    return Err(bad(&format!("must be one of {}", k.choices.join(", "))));
                }
            }
        }
    }
    Ok(())
}

/// The settings of a topic that the broker acts on, resolved from its overrides and the
/// broker defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effective {
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub max_message_bytes: i32,
    pub min_insync_replicas: i32,
    pub log_append_time: bool,
    /// `flush.messages=1`: sync each append before acknowledging it.
    pub flush_each_append: bool,
    pub delete_retention: bool,
    /// `cleanup.policy` includes compact, and the cleaner's settings for it.
    pub compact: bool,
    pub delete_retention_ms: i64,
    pub min_compaction_lag_ms: i64,
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio` in millionths (Effective stays `Eq`).
    pub min_cleanable_ppm: u32,
    pub segment_bytes: i64,
    pub segment_ms: i64,
}

impl Effective {
    pub fn resolve(overrides: &BTreeMap<String, String>, broker: &Config) -> Effective {
        let get = |name: &str| -> String {
            overrides.get(name).cloned().unwrap_or_else(|| {
                lookup(name)
                    .map(|k| default_value(k, broker).0)
                    .unwrap_or_default()
            })
        };
        let int = |name: &str| get(name).trim().parse::<i64>().unwrap_or(-1);
        Effective {
            retention_ms: int("retention.ms"),
            retention_bytes: int("retention.bytes"),
            max_message_bytes: int("max.message.bytes").clamp(0, i32::MAX as i64) as i32,
            min_insync_replicas: int("min.insync.replicas").clamp(1, i32::MAX as i64) as i32,
            log_append_time: get("message.timestamp.type").eq_ignore_ascii_case("LogAppendTime"),
            flush_each_append: int("flush.messages") == 1,
            delete_retention: get("cleanup.policy").contains("delete"),
            compact: get("cleanup.policy").contains("compact"),
            delete_retention_ms: int("delete.retention.ms").max(0),
            min_compaction_lag_ms: int("min.compaction.lag.ms").max(0),
            max_compaction_lag_ms: int("max.compaction.lag.ms").max(1),
            min_cleanable_ppm: (get("min.cleanable.dirty.ratio")
                .trim()
                .parse::<f64>()
                .unwrap_or(0.5)
                .clamp(0.0, 1.0)
                * 1e6) as u32,
            segment_bytes: int("segment.bytes").max(1),
            segment_ms: int("segment.ms").max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_key_and_reason() {
        assert!(validate("retention.ms", "1000").is_ok());
        assert!(validate("retention.ms", "-1").is_ok());
        let e = validate("retention.ms", "soon").unwrap_err().to_string();
        assert!(e.contains("retention.ms") && e.contains("soon"), "{e}");
        assert!(validate("retention.ms", "-5").is_err());
        assert!(validate("max.message.bytes", "99999999999").is_err());
        assert!(validate("cleanup.policy", "compact, delete").is_ok());
        assert!(validate("cleanup.policy", "shred").is_err());
        assert!(validate("no.such.key", "1").is_err());
        assert!(validate("min.cleanable.dirty.ratio", "2").is_err());
    }

    #[test]
    fn broker_settings_are_topic_defaults() {
        for k in KEYS {
            if let Some(bk) = k.broker_key {
                assert!(crate::config::keys::lookup(bk).is_some(), "{bk}");
            }
        }
        let broker = Config::load(None, Vec::new(), &["log.retention.hours=1".into()]).unwrap();
        let k = lookup("retention.ms").unwrap();
        assert_eq!(
            default_value(k, &broker),
            ("3600000".to_string(), Source::StaticBroker)
        );
        let k = lookup("max.message.bytes").unwrap();
        assert_eq!(
            default_value(k, &broker),
            ("1048588".to_string(), Source::Default)
        );
        let mut o = BTreeMap::new();
        o.insert("retention.bytes".to_string(), "100".to_string());
        o.insert(
            "message.timestamp.type".to_string(),
            "LogAppendTime".to_string(),
        );
        let e = Effective::resolve(&o, &broker);
        assert_eq!(e.retention_ms, 3_600_000);
        assert_eq!(e.retention_bytes, 100);
        assert!(e.log_append_time);
        assert!(e.delete_retention);
    }
}
