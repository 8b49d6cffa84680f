//! Group-level configs (KIP-848, KIP-932): the keys Kafka lets `kafka-configs --entity-type
//! groups` set on one group, their broker-wide defaults, the bounds the broker puts on them,
//! and the settings in force for a group.
//!
//! DescribeConfigs and IncrementalAlterConfigs of a GROUP resource go through [`KEYS`]; the
//! coordinator and the share partitions read [`GroupSettings`], so a key is described,
//! checked and applied the same way everywhere.

use std::collections::BTreeMap;
use std::time::Duration;

pub use crate::config::keys::{Kind, Source};
use crate::config::Config;
use crate::error::{Error, Result};

/// What a value must be.
pub enum Check {
    /// A whole number within the broker's `min` and `max` keys.
    Within {
        min: &'static str,
        max: &'static str,
    },
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// `earliest`, `latest` or `by_duration:<ISO-8601 duration>`.
    OffsetReset,
}

pub struct Key {
    pub name: &'static str,
    pub kind: Kind,
    /// The broker setting that supplies the default, if any.
    pub broker_key: Option<&'static str>,
    pub default: &'static str,
    pub check: Check,
    pub doc: &'static str,
}

const fn within(
    name: &'static str,
    broker_key: &'static str,
    min: &'static str,
    max: &'static str,
    doc: &'static str,
) -> Key {
    Key {
        name,
        kind: Kind::Int,
        broker_key: Some(broker_key),
        default: "",
        check: Check::Within { min, max },
        doc,
    }
}

/// The group configs Cairn applies, as Kafka 4.4's `GroupConfig` names them.
pub static KEYS: &[Key] = &[
    within(
        "consumer.session.timeout.ms",
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
        "The timeout to detect client failures when using the consumer group protocol.",
    ),
    within(
        "consumer.heartbeat.interval.ms",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
        "The heartbeat interval given to the members of a consumer group.",
    ),
    within(
        "share.session.timeout.ms",
        "group.share.session.timeout.ms",
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
        "The timeout to detect client failures when using the share group protocol.",
    ),
    within(
        "share.heartbeat.interval.ms",
        "group.share.heartbeat.interval.ms",
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
        "The heartbeat interval given to the members of a share group.",
    ),
    within(
        "share.record.lock.duration.ms",
        "group.share.record.lock.duration.ms",
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
        "The record acquisition lock duration in milliseconds for share groups.",
    ),
    within(
        "share.delivery.count.limit",
        "group.share.delivery.count.limit",
        "group.share.min.delivery.count.limit",
        "group.share.max.delivery.count.limit",
        "The maximum number of delivery attempts for a record delivered to a share group.",
    ),
    within(
        "share.partition.max.record.locks",
        "group.share.partition.max.record.locks",
        "group.share.min.partition.max.record.locks",
        "group.share.max.partition.max.record.locks",
        "Share-group record lock limit per share-partition.",
    ),
    Key {
        name: "share.auto.offset.reset",
        kind: Kind::String,
        broker_key: None,
        default: "latest",
        check: Check::OffsetReset,
        doc: "The strategy to initialize the share-partition start offset: earliest, latest or by_duration:<ISO-8601 duration>.",
    },
    Key {
        name: "share.isolation.level",
        kind: Kind::String,
        broker_key: None,
        default: "read_uncommitted",
        check: Check::OneOf(&["read_committed", "read_uncommitted"]),
        doc: "Controls how to read records written transactionally.",
    },
    Key {
        name: "share.renew.acknowledge.enable",
        kind: Kind::Boolean,
        broker_key: None,
        default: "true",
        check: Check::OneOf(&["true", "false"]),
        doc: "Whether the renew acknowledge type is enabled for the share group.",
    },
];

pub fn lookup(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// Group configs Kafka 4.4 knows but Cairn does not apply, by name or by prefix (ending
/// in `.`), with the reason. They are refused rather than accepted and ignored.
static NOT_APPLIED: &[(&str, &str)] = &[
    ("streams.", "Cairn has no streams groups (KIP-1071)"),
    (
        "errors.deadletterqueue.",
        "Cairn's share groups have no dead-letter queue",
    ),
    (
        "consumer.assignment.interval.ms",
        "Cairn computes a consumer group's assignment on the heartbeat that needs it",
    ),
    (
        "share.assignment.interval.ms",
        "Cairn computes a share group's assignment on the heartbeat that needs it",
    ),
    (
        "consumer.assignor.offload.enable",
        "Cairn runs assignors on the heartbeat, never offloaded",
    ),
    (
        "share.assignor.offload.enable",
        "Cairn runs assignors on the heartbeat, never offloaded",
    ),
];

/// The INVALID_CONFIG answer for a group config name Cairn does not apply: Kafka's message
/// for a name it does not know either, a reason for one Kafka knows.
pub fn unknown(name: &str) -> Error {
    let known_to_kafka = NOT_APPLIED
        .iter()
        .find(|(key, _)| match key.ends_with('.') {
            true => name.starts_with(key),
            false => name == *key,
        });
    Error::InvalidConfig(match known_to_kafka {
        Some((_, why)) => format!("Group config {name} is not supported: {why}."),
        None => format!("Unknown group config name: {name}"),
    })
}

/// The value in force for `k` when the group does not set it, and where it comes from.
pub fn default_value(k: &Key, broker: &Config) -> (String, Source) {
    match k.broker_key {
        Some(bk) => {
            let source = match broker.explicit.contains_key(bk) {
                true => Source::StaticBroker,
                false => Source::Default,
            };
            (broker.number(bk).to_string(), source)
        }
        None => (k.default.to_string(), Source::Default),
    }
}

/// Checks `value` for group config `name` as Kafka's `GroupConfig.validate` does: INVALID_CONFIG
/// with a message naming the key and the bound it breaks.
pub fn validate(name: &str, value: &str, broker: &Config) -> Result<()> {
    let k = lookup(name).ok_or_else(|| unknown(name))?;
    let bad = |why: String| {
        Err(Error::InvalidConfig(format!(
            "Invalid value {value} for configuration {name}: {why}"
        )))
    };
    match k.check {
        Check::Within { min, max } => {
            let Ok(v) = value.trim().parse::<i64>() else {
                return bad("Not a number of type INT".into());
            };
            let (lo, hi) = (broker.number(min), broker.number(max));
            if v < lo {
                return bad(format!(
                    "{name} must be greater than or equal to {min} ({lo})"
                ));
            }
            if v > hi {
                return bad(format!("{name} must be less than or equal to {max} ({hi})"));
            }
            Ok(())
        }
        Check::OneOf(words) => match words.contains(&value.trim()) {
            true => Ok(()),
            false => bad(format!("String must be one of: {}", words.join(", "))),
        },
        Check::OffsetReset => match OffsetReset::parse(value) {
            Some(_) => Ok(()),
            None => bad(
                "must be earliest, latest or by_duration:<ISO-8601 duration, not negative>".into(),
            ),
        },
    }
}

/// Where a share group starts reading a partition it never read (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
    /// The first record at most this old.
    ByDuration(Duration),
}

impl OffsetReset {
    pub fn parse(value: &str) -> Option<OffsetReset> {
        match value.trim() {
            "earliest" => Some(OffsetReset::Earliest),
            "latest" => Some(OffsetReset::Latest),
            v => v
                .strip_prefix("by_duration:")
                .and_then(iso_duration)
                .map(OffsetReset::ByDuration),
        }
    }
}

/// An ISO-8601 duration as Java's `Duration.parse` reads it (`PnDTnHnMn.nS`), not negative.
fn iso_duration(text: &str) -> Option<Duration> {
    let upper = text.trim().to_ascii_uppercase();
    let rest = upper.strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) if !t.is_empty() => (d, t),
        Some(_) => return None,
        None => (rest, ""),
    };
    if days.is_empty() && time.is_empty() {
        return None;
    }
    let mut secs = 0f64;
    let mut take = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut s = part;
        let mut seen = 0;
        while !s.is_empty() {
            let end = s.find(|c: char| c.is_ascii_alphabetic())?;
            let unit = s[end..].chars().next()?;
            let at = units.iter().skip(seen).position(|(u, _)| *u == unit)? + seen;
            let n: f64 = s[..end].parse().ok()?;
            if n < 0.0 || !n.is_finite() || (unit != 'S' && s[..end].contains('.')) {
                return None;
            }
            secs += n * units[at].1;
            seen = at + 1;
            s = &s[end + 1..];
        }
        Some(())
    };
    take(days, &[('D', 86_400.0)])?;
    take(time, &[('H', 3_600.0), ('M', 60.0), ('S', 1.0)])?;
    Some(Duration::from_secs_f64(secs))
}

/// The settings in force for one group: its configs over the broker's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSettings {
    pub consumer_session_timeout: Duration,
    pub consumer_heartbeat_interval: Duration,
    pub share_session_timeout: Duration,
    pub share_heartbeat_interval: Duration,
    pub share_record_lock_ms: i64,
    pub share_delivery_count_limit: i16,
    pub share_partition_max_record_locks: i64,
    pub share_auto_offset_reset: OffsetReset,
    pub share_read_committed: bool,
    /// Members may renew their record locks (KIP-1222's RENEW acknowledgements).
    pub share_renew_enabled: bool,
}

impl GroupSettings {
    /// `overrides` (the group's configs, each checked when set) over `broker`'s defaults.
    pub fn resolve(overrides: Option<&BTreeMap<String, String>>, broker: &Config) -> GroupSettings {
        let value = |name: &str| -> String {
            overrides
                .and_then(|o| o.get(name))
                .cloned()
                .unwrap_or_else(|| {
                    default_value(lookup(name).expect("a group config key"), broker).0
                })
        };
        let number = |name: &str| value(name).trim().parse::<i64>().unwrap_or_default();
        let ms = |name: &str| Duration::from_millis(number(name).max(0) as u64);
        GroupSettings {
            consumer_session_timeout: ms("consumer.session.timeout.ms"),
            consumer_heartbeat_interval: ms("consumer.heartbeat.interval.ms"),
            share_session_timeout: ms("share.session.timeout.ms"),
            share_heartbeat_interval: ms("share.heartbeat.interval.ms"),
            share_record_lock_ms: number("share.record.lock.duration.ms"),
            share_delivery_count_limit: number("share.delivery.count.limit") as i16,
            share_partition_max_record_locks: number("share.partition.max.record.locks"),
            share_auto_offset_reset: OffsetReset::parse(&value("share.auto.offset.reset"))
                .unwrap_or(OffsetReset::Latest),
            share_read_committed: value("share.isolation.level").trim() == "read_committed",
            share_renew_enabled: value("share.renew.acknowledge.enable")
                .trim()
                .eq_ignore_ascii_case("true"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(props: &[(&str, &str)]) -> Config {
        let mut p: BTreeMap<String, String> = props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        p.insert("log.dirs".into(), "/tmp/cairn-group-config-test".into());
        Config::from_props(p).unwrap()
    }

    #[test]
    fn iso_durations_read_as_java_reads_them() {
        let d = |s: &str| iso_duration(s).map(|d| d.as_millis());
        assert_eq!(d("PT1H"), Some(3_600_000));
        assert_eq!(d("P1DT2H3M4.5S"), Some(93_784_500));
        assert_eq!(d("pt30s"), Some(30_000));
        assert_eq!(d("P2D"), Some(172_800_000));
        for bad in [
            "", "P", "PT", "1H", "PT-1H", "PT1M1H", "PT1.5H", "P1H", "PTxS",
        ] {
            assert_eq!(d(bad), None, "{bad}");
        }
    }

    #[test]
    fn kafkas_group_configs_cairn_does_not_apply_are_refused_with_the_reason() {
        let c = broker(&[]);
        let e = validate("streams.num.standby.replicas", "1", &c).unwrap_err();
        assert!(e.to_string().contains("no streams groups"), "{e}");
        let e = validate("share.assignment.interval.ms", "0", &c).unwrap_err();
        assert!(e.to_string().contains("not supported"), "{e}");
        let e = validate("no.such.key", "1", &c).unwrap_err();
        assert!(
            e.to_string()
                .contains("Unknown group config name: no.such.key"),
            "{e}"
        );
    }

    #[test]
    fn values_are_checked_against_the_brokers_bounds() {
        let c = broker(&[("group.share.min.record.lock.duration.ms", "1000")]);
        validate("share.record.lock.duration.ms", "1000", &c).unwrap();
        let e = validate("share.record.lock.duration.ms", "999", &c).unwrap_err();
        assert!(
            e.to_string()
                .contains("group.share.min.record.lock.duration.ms"),
            "{e}"
        );
        assert!(validate("share.record.lock.duration.ms", "60001", &c).is_err());
        assert!(validate("share.delivery.count.limit", "11", &c).is_err());
        assert!(validate("share.delivery.count.limit", "x", &c).is_err());
        validate("share.auto.offset.reset", "by_duration:PT10M", &c).unwrap();
        assert!(validate("share.auto.offset.reset", "by_duration:-PT10M", &c).is_err());
        assert!(validate("share.auto.offset.reset", "none", &c).is_err());
        assert!(validate("share.isolation.level", "read_committed", &c).is_ok());
        assert!(validate("no.such.key", "1", &c).is_err());
    }

    #[test]
    fn a_groups_configs_win_over_the_brokers() {
        let c = broker(&[("group.share.record.lock.duration.ms", "20000")]);
        let none = GroupSettings::resolve(None, &c);
        assert_eq!(none.share_record_lock_ms, 20_000);
        assert_eq!(none.share_auto_offset_reset, OffsetReset::Latest);
        assert_eq!(none.share_delivery_count_limit, 5);
        assert!(!none.share_read_committed);
        assert!(none.share_renew_enabled);
        let o: BTreeMap<String, String> = [
            ("share.record.lock.duration.ms", "40000"),
            ("share.auto.offset.reset", "earliest"),
            ("share.isolation.level", "read_committed"),
            ("share.renew.acknowledge.enable", "false"),
            ("consumer.session.timeout.ms", "50000"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let s = GroupSettings::resolve(Some(&o), &c);
        assert_eq!(s.share_record_lock_ms, 40_000);
        assert_eq!(s.share_auto_offset_reset, OffsetReset::Earliest);
        assert!(s.share_read_committed);
        assert!(!s.share_renew_enabled);
        assert_eq!(s.consumer_session_timeout, Duration::from_secs(50));
        assert_eq!(s.share_session_timeout, Duration::from_secs(45));
        assert_eq!(
            default_value(lookup("share.record.lock.duration.ms").unwrap(), &c).1,
            Source::StaticBroker
        );
    }
}
