//! The broker config keys Cairn accepts, in one table: how each value is checked, its
//! default, its type and synonyms as DescribeConfigs reports them, and one line of
//! documentation.
//!
//! Parsing ([`super::Config::from_props`]), the list of known keys, the BROKER answer of
//! DescribeConfigs and the README's config table all come from [`KEYS`], so a key cannot be
//! accepted without being described or documented (the tests below check the README).

use std::collections::BTreeMap;

use super::Config;

/// Kafka's ConfigType as DescribeConfigs v3+ reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    /// A secret: DescribeConfigs shows it as sensitive, with no value.
    Password = 9,
}

/// Where a config value came from, as Kafka's DescribeConfigs `config_source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    DynamicTopic = 1,
    DynamicBroker = 2,
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
    DynamicGroup = 8,
}

/// The keys a running broker takes from the cluster metadata (`kafka-configs --alter
/// --entity-type brokers`), a part of what Kafka's `DynamicBrokerConfig` allows: the
/// topics' defaults and the log cleaner's settings.
pub const DYNAMIC: &[&str] = &[
    "log.cleanup.policy",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.threads",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.backoff.ms",
    "log.retention.ms",
    "log.retention.minutes",
    "log.retention.hours",
    "log.retention.bytes",
    "log.segment.bytes",
    "log.roll.ms",
    "message.max.bytes",
    "min.insync.replicas",
];

/// Whether `name` may be changed on a running broker ([`DYNAMIC`]).
pub fn is_dynamic(name: &str) -> bool {
    DYNAMIC.contains(&name)
}

/// How a value given for a key is checked before the broker starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// A whole number within `min..=max`.
    Int { min: i64, max: i64 },
    /// `true` or `false`, in any case.
    Bool,
    /// Free text here; the key's own parser in `config` checks it (listeners, voters, ...).
    Text,
}

/// How DescribeConfigs shows a key's value.
#[derive(Clone, Copy)]
pub enum Shown {
    /// The value as given (numbers re-printed, booleans lower-cased), else the default.
    Given,
    /// Computed from the parsed config, because synonyms or other keys decide it.
    Derived(fn(&Config) -> String),
}

/// One broker config key.
pub struct Key {
    pub name: &'static str,
    /// Kafka's ConfigDef type of the key, reported as `config_type`.
    pub kind: Kind,
    pub check: Check,
    /// The default as Kafka would print it; `None` where there is none or it is derived.
    pub default: Option<&'static str>,
    /// The keys this one's value is read from, strongest first and itself included, as
    /// Kafka's `DynamicBrokerConfig.brokerConfigSynonyms` lists them; empty means only
    /// itself.
    pub synonyms: &'static [&'static str],
    pub shown: Shown,
    pub doc: &'static str,
}

const fn key(name: &'static str, kind: Kind, check: Check, doc: &'static str) -> Key {
    Key {
        name,
        kind,
        check,
        default: None,
        synonyms: &[],
        shown: Shown::Given,
        doc,
    }
}

const fn int(name: &'static str, kind: Kind, min: i64, max: i64, default: &'static str) -> Key {
    Key {
        default: Some(default),
        ..key(name, kind, Check::Int { min, max }, "")
    }
}

const fn boolean(name: &'static str, default: &'static str) -> Key {
    Key {
        default: Some(default),
        ..key(name, Kind::Boolean, Check::Bool, "")
    }
}

const fn text(name: &'static str, kind: Kind) -> Key {
    key(name, kind, Check::Text, "")
}

const INT_MAX: i64 = i32::MAX as i64;
const SHORT_MAX: i64 = i16::MAX as i64;
const LONG_MAX: i64 = i64::MAX;
const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;

/// Kafka's default map: each security protocol is a listener name of its own.
pub const PROTOCOL_MAP_DEFAULT: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

fn listeners_text(ls: &[super::Listener]) -> String {
    ls.iter()
        .map(|l| format!("{}://{}:{}", l.name, l.host, l.port))
        .collect::<Vec<_>>()
        .join(",")
}

/// Every key Cairn honours, in the README's order.
pub static KEYS: &[Key] = &[
    Key {
        synonyms: &["node.id", "broker.id"],
        shown: Shown::Derived(|c| c.node_id.to_string()),
        doc: "This broker's id.",
        ..int("node.id", Kind::Int, 0, INT_MAX, "1")
    },
    Key {
        default: None,
        synonyms: &["node.id", "broker.id"],
        shown: Shown::Derived(|c| c.node_id.to_string()),
        doc: "The older name of node.id.",
        ..int("broker.id", Kind::Int, 0, INT_MAX, "1")
    },
    Key {
        default: Some("PLAINTEXT://127.0.0.1:9092"),
        doc: "Where clients connect, as NAME://host:port entries: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.",
        ..text("listeners", Kind::String)
    },
    Key {
        shown: Shown::Derived(|c| listeners_text(&c.advertised_listeners)),
        doc: "What Metadata tells clients; by default the listeners, controller ones left out.",
        ..text("advertised.listeners", Kind::String)
    },
    Key {
        default: Some(PROTOCOL_MAP_DEFAULT),
        shown: Shown::Derived(|c| {
            c.listener_security_protocol_map
                .iter()
                .map(|(name, protocol)| format!("{name}:{protocol}"))
                .collect::<Vec<_>>()
                .join(",")
        }),
        doc: "Security protocol of each listener name; unset, controller listeners are PLAINTEXT.",
        ..text("listener.security.protocol.map", Kind::String)
    },
    Key {
        default: Some("JKS"),
        doc: "PKCS12 or PEM (a JKS file that is really PKCS12 is read; a real JKS one is refused).",
        ..text("ssl.keystore.type", Kind::String)
    },
    Key {
        doc: "The TLS listeners' key and certificate chain, a PKCS12 or PEM file.",
        ..text("ssl.keystore.location", Kind::String)
    },
    Key {
        doc: "The keystore's password.",
        ..text("ssl.keystore.password", Kind::Password)
    },
    Key {
        doc: "The private key's password, if it differs from the keystore's.",
        ..text("ssl.key.password", Kind::Password)
    },
    Key {
        doc: "The certificate chain as PEM text (with ssl.keystore.type=PEM).",
        ..text("ssl.keystore.certificate.chain", Kind::Password)
    },
    Key {
        doc: "The private key as PEM text (with ssl.keystore.type=PEM).",
        ..text("ssl.keystore.key", Kind::Password)
    },
    Key {
        default: Some("JKS"),
        doc: "PKCS12 or PEM, as ssl.keystore.type.",
        ..text("ssl.truststore.type", Kind::String)
    },
    Key {
        doc: "The certificates client certificates are checked against.",
        ..text("ssl.truststore.location", Kind::String)
    },
    Key {
        doc: "The truststore's password.",
        ..text("ssl.truststore.password", Kind::Password)
    },
    Key {
        doc: "Trusted certificates as PEM text (with ssl.truststore.type=PEM).",
        ..text("ssl.truststore.certificates", Kind::Password)
    },
    Key {
        default: Some("none"),
        doc: "none, requested or required: whether clients present a certificate.",
        ..text("ssl.client.auth", Kind::String)
    },
    Key {
        default: Some("TLSv1.2,TLSv1.3"),
        doc: "The TLS versions the TLS listeners accept.",
        ..text("ssl.enabled.protocols", Kind::List)
    },
    Key {
        default: Some("TLSv1.3"),
        doc: "Accepted for Kafka's sake; ssl.enabled.protocols decides.",
        ..text("ssl.protocol", Kind::String)
    },
    Key {
        default: Some(""),
        doc: "IANA names of the cipher suites allowed; empty means the TLS stack's defaults.",
        ..text("ssl.cipher.suites", Kind::List)
    },
    Key {
        default: Some("DEFAULT"),
        doc: "How a client certificate's distinguished name becomes the principal's name.",
        ..text("ssl.principal.mapping.rules", Kind::String)
    },
    Key {
        default: Some("https"),
        doc: "https checks that another broker's certificate names the host dialled; empty does not.",
        ..text("ssl.endpoint.identification.algorithm", Kind::String)
    },
    Key {
        default: Some("GSSAPI"),
        doc: "The SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.",
        ..text("sasl.enabled.mechanisms", Kind::List)
    },
    Key {
        default: Some("GSSAPI"),
        doc: "The mechanism brokers authenticate to each other with on a SASL inter-broker listener.",
        ..text("sasl.mechanism.inter.broker.protocol", Kind::String)
    },
    Key {
        default: Some("GSSAPI"),
        doc: "The mechanism nodes authenticate to the controllers with on a SASL controller listener: PLAIN or OAUTHBEARER.",
        ..text("sasl.mechanism.controller.protocol", Kind::String)
    },
    Key {
        doc: "A listener's JAAS login module, set as listener.name.<l>.<mechanism>.sasl.jaas.config.",
        ..text("sasl.jaas.config", Kind::Password)
    },
    Key {
        doc: "Longest life of a SASL session before the client must re-authenticate (KIP-368); 0 or less is none.",
        ..int("connections.max.reauth.ms", Kind::Long, i64::MIN, LONG_MAX, "0")
    },
    Key {
        default: Some(""),
        doc: "The authorizer: empty for none, or org.apache.kafka.metadata.authorizer.StandardAuthorizer.",
        ..text("authorizer.class.name", Kind::String)
    },
    Key {
        default: Some(""),
        doc: "Principals the authorizer always allows, separated by semicolons (User:admin;User:broker).",
        ..text("super.users", Kind::String)
    },
    Key {
        doc: "Whether a resource no ACL covers is open to everyone.",
        ..boolean("allow.everyone.if.no.acl.found", "false")
    },
    Key {
        default: Some("./data"),
        synonyms: &["log.dirs", "log.dir"],
        shown: Shown::Derived(|c| {
            c.log_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(",")
        }),
        doc: "One RocksDB per directory; the first also holds metadata and groups.",
        ..text("log.dirs", Kind::String)
    },
    Key {
        doc: "A single log directory, used when log.dirs is not set.",
        ..text("log.dir", Kind::String)
    },
    Key {
        doc: "Partitions of auto-created topics and of CreateTopics asking for -1.",
        ..int("num.partitions", Kind::Int, 1, 1_000_000, "1")
    },
    Key {
        doc: "Replicas of topics created asking for -1.",
        ..int("default.replication.factor", Kind::Int, 1, SHORT_MAX, "1")
    },
    Key {
        doc: "Metadata creates missing topics when the client allows.",
        ..boolean("auto.create.topics.enable", "true")
    },
    Key {
        doc: "Largest record batch in bytes.",
        ..int("message.max.bytes", Kind::Int, 0, INT_MAX, "1048588")
    },
    Key {
        doc: "A client connection with no request for this long is closed; negative: never.",
        ..int("connections.max.idle.ms", Kind::Long, i64::MIN, LONG_MAX, "600000")
    },
    Key {
        doc: "Kafka's bound on requests read and waiting for a request handler thread. Cairn has no such queue: each connection's requests are handled by its own task as they are read, one at a time, and the next is read only once the previous one is being answered, so requests read and not yet handled are at most one per connection (bounded by max.connections and socket.request.max.bytes). Checked as Kafka checks it, then met by construction.",
        ..int("queued.max.requests", Kind::Int, 1, INT_MAX, "500")
    },
    Key {
        doc: "Most connections the broker holds at once (the inter-broker listener is exempt when there are others), and per listener as listener.name.<l>.max.connections; a listener at its limit accepts again when a connection closes.",
        ..int("max.connections", Kind::Int, 0, INT_MAX, "2147483647")
    },
    Key {
        doc: "Most new connections per second the broker accepts (the inter-broker listener is exempt when there are others), and per listener as listener.name.<l>.max.connection.creation.rate; past it, accepting waits up to a second per connection.",
        ..int("max.connection.creation.rate", Kind::Int, 0, INT_MAX, "2147483647")
    },
    Key {
        doc: "Most connections one address holds at once; one more is accepted and closed.",
        ..int("max.connections.per.ip", Kind::Int, 0, INT_MAX, "2147483647")
    },
    Key {
        default: Some(""),
        doc: "Per-address limits over max.connections.per.ip: host:count or ip:count, comma-separated.",
        ..text("max.connections.per.ip.overrides", Kind::String)
    },
    Key {
        doc: "Most bytes one Fetch or ShareFetch answer carries, whatever the request asks; the first batch is sent whole even when larger, so a consumer always progresses.",
        ..int("fetch.max.bytes", Kind::Int, 1024, INT_MAX, "57671680")
    },
    Key {
        doc: "Cairn's own: most bytes of fetched records the broker holds in memory at once, from their read until their response is written to its socket (Kafka sends them from its files with sendfile and holds none). A fetch gets what is left of it, and one granted nothing still gets its first batch, so every fetcher progresses and the bound is exceeded by at most one batch per fetch in flight.",
        ..int("fetch.memory.max.bytes", Kind::Long, 1 << 20, LONG_MAX, "268435456")
    },
    Key {
        doc: "Cairn's own: true writes the files each log dir's store makes when it moves appended batches out of memory (flushes and compactions) with direct I/O, around the page cache, as Redpanda writes its logs. Producing then costs less CPU (each byte is copied into the page cache once, for the write-ahead log, instead of twice), but a read of batches no longer in the broker's memory comes from the disk rather than the page cache, where Kafka would find them.",
        ..boolean("log.store.direct.writes", "false")
    },
    Key {
        doc: "Connections the kernel holds for a listener before the broker accepts them (listen(2)'s backlog; the kernel caps it at net.core.somaxconn). Kafka's default is 50; Cairn's is 1024, because at 50 a crowd of clients connecting at once has its connection attempts dropped and retried a second later (docs/FLOOD.md).",
        ..int("socket.listen.backlog.size", Kind::Int, 1, INT_MAX, "1024")
    },
    Key {
        doc: "Largest request frame in bytes.",
        ..int(
            "socket.request.max.bytes",
            Kind::Int,
            1,
            INT_MAX,
            "104857600",
        )
    },
    Key {
        default: None,
        synonyms: &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
        shown: Shown::Derived(|c| c.log_retention_ms.to_string()),
        doc: "Time retention in milliseconds; -1 keeps records forever.",
        ..int("log.retention.ms", Kind::Long, -1, LONG_MAX, "")
    },
    Key {
        default: None,
        doc: "Time retention in minutes, used when log.retention.ms is not set.",
        ..int(
            "log.retention.minutes",
            Kind::Int,
            -1,
            LONG_MAX / MS_PER_MINUTE,
            "",
        )
    },
    Key {
        doc: "Time retention in hours, used when neither log.retention.ms nor .minutes is set.",
        ..int(
            "log.retention.hours",
            Kind::Int,
            -1,
            LONG_MAX / MS_PER_HOUR,
            "168",
        )
    },
    Key {
        doc: "Size retention per partition in bytes; -1 for none.",
        ..int("log.retention.bytes", Kind::Long, -1, LONG_MAX, "-1")
    },
    Key {
        doc: "How often retention runs.",
        ..int(
            "log.retention.check.interval.ms",
            Kind::Long,
            1,
            LONG_MAX,
            "300000",
        )
    },
    Key {
        doc: "The default cleanup.policy of topics: delete, compact, or both.",
        default: Some("delete"),
        ..text("log.cleanup.policy", Kind::List)
    },
    Key {
        doc: "Whether the log cleaner compacts topics whose cleanup.policy includes compact.",
        ..boolean("log.cleaner.enable", "true")
    },
    Key {
        doc: "How long the log cleaner sleeps when no partition is due for cleaning.",
        ..int("log.cleaner.backoff.ms", Kind::Long, 0, LONG_MAX, "15000")
    },
    Key {
        doc: "How many partitions the log cleaner cleans at once (0: none).",
        ..int("log.cleaner.threads", Kind::Int, 0, INT_MAX, "1")
    },
    Key {
        doc: "The most bytes per second all log cleaner threads together read and write; a faster pass sleeps.",
        default: Some("1.7976931348623157E308"),
        ..text("log.cleaner.io.max.bytes.per.second", Kind::Double)
    },
    Key {
        doc: "Memory for the log cleaner's maps of the latest offset of each key, shared out among its threads; a pass whose dirty keys do not fit cleans what fits and goes on in the next.",
        ..int(
            "log.cleaner.dedupe.buffer.size",
            Kind::Long,
            0,
            LONG_MAX,
            "134217728",
        )
    },
    Key {
        doc: "The default delete.retention.ms of topics: how long a tombstone stays once a cleaning reached it.",
        ..int(
            "log.cleaner.delete.retention.ms",
            Kind::Long,
            0,
            LONG_MAX,
            "86400000",
        )
    },
    Key {
        doc: "The default min.compaction.lag.ms of topics.",
        ..int("log.cleaner.min.compaction.lag.ms", Kind::Long, 0, LONG_MAX, "0")
    },
    Key {
        doc: "The default max.compaction.lag.ms of topics.",
        ..int(
            "log.cleaner.max.compaction.lag.ms",
            Kind::Long,
            1,
            LONG_MAX,
            "9223372036854775807",
        )
    },
    Key {
        doc: "The default min.cleanable.dirty.ratio of topics (0 to 1).",
        default: Some("0.5"),
        ..text("log.cleaner.min.cleanable.ratio", Kind::Double)
    },
    Key {
        doc: "The default segment.bytes of topics: the active segment, which the cleaner never touches, ends past this size.",
        ..int("log.segment.bytes", Kind::Int, 14, INT_MAX, "1073741824")
    },
    Key {
        doc: "The default segment.ms of topics: the active segment ends after this time.",
        ..int("log.roll.ms", Kind::Long, 1, LONG_MAX, "604800000")
    },
    Key {
        doc: "A producer that last wrote to a partition this long ago (by its batches' timestamps) with no transaction open there is forgotten by it.",
        ..int("producer.id.expiration.ms", Kind::Int, 1, INT_MAX, "86400000")
    },
    Key {
        doc: "How often partitions forget expired producers.",
        ..int(
            "producer.id.expiration.check.interval.ms",
            Kind::Int,
            1,
            INT_MAX,
            "600000",
        )
    },
    Key {
        doc: "acks=all needs this many in-sync replicas.",
        ..int("min.insync.replicas", Kind::Int, 1, INT_MAX, "1")
    },
    Key {
        doc: "DeleteTopics deletes; false refuses it.",
        ..boolean("delete.topic.enable", "true")
    },
    Key {
        doc: "How long a new group waits for more members before its first rebalance.",
        ..int(
            "group.initial.rebalance.delay.ms",
            Kind::Int,
            0,
            INT_MAX,
            "3000",
        )
    },
    Key {
        doc: "Lowest session.timeout.ms a classic consumer may ask for.",
        ..int(
            "group.min.session.timeout.ms",
            Kind::Int,
            0,
            INT_MAX,
            "6000",
        )
    },
    Key {
        doc: "Highest session.timeout.ms a classic consumer may ask for.",
        ..int(
            "group.max.session.timeout.ms",
            Kind::Int,
            0,
            INT_MAX,
            "1800000",
        )
    },
    Key {
        doc: "Session timeout of KIP-848 consumer group members.",
        ..int(
            "group.consumer.session.timeout.ms",
            Kind::Int,
            1,
            INT_MAX,
            "45000",
        )
    },
    Key {
        doc: "Heartbeat interval of KIP-848 consumer group members.",
        ..int(
            "group.consumer.heartbeat.interval.ms",
            Kind::Int,
            1,
            INT_MAX,
            "5000",
        )
    },
    Key {
        doc: "Session timeout of share group members (KIP-932).",
        ..int(
            "group.share.session.timeout.ms",
            Kind::Int,
            1,
            INT_MAX,
            "45000",
        )
    },
    Key {
        doc: "Heartbeat interval of share group members (KIP-932).",
        ..int(
            "group.share.heartbeat.interval.ms",
            Kind::Int,
            1,
            INT_MAX,
            "5000",
        )
    },
    Key {
        doc: "How long a share group member holds the records it acquired before they can be delivered to another.",
        ..int(
            "group.share.record.lock.duration.ms",
            Kind::Int,
            1000,
            3_600_000,
            "30000",
        )
    },
    Key {
        doc: "Deliveries of a share group record after which it is archived, never delivered again.",
        ..int("group.share.delivery.count.limit", Kind::Int, 2, 10, "5")
    },
    Key {
        doc: "Records a share partition keeps in flight (acquired, or waiting behind an undecided one).",
        ..int(
            "group.share.partition.max.record.locks",
            Kind::Int,
            100,
            10_000,
            "2000",
        )
    },
    Key {
        doc: "Lowest consumer.session.timeout.ms a KIP-848 group's config may set.",
        ..int("group.consumer.min.session.timeout.ms", Kind::Int, 1, INT_MAX, "45000")
    },
    Key {
        doc: "Highest consumer.session.timeout.ms a KIP-848 group's config may set.",
        ..int("group.consumer.max.session.timeout.ms", Kind::Int, 1, INT_MAX, "60000")
    },
    Key {
        doc: "Lowest consumer.heartbeat.interval.ms a KIP-848 group's config may set.",
        ..int("group.consumer.min.heartbeat.interval.ms", Kind::Int, 1, INT_MAX, "5000")
    },
    Key {
        doc: "Highest consumer.heartbeat.interval.ms a KIP-848 group's config may set.",
        ..int("group.consumer.max.heartbeat.interval.ms", Kind::Int, 1, INT_MAX, "15000")
    },
    Key {
        doc: "Lowest share.session.timeout.ms a share group's config may set.",
        ..int("group.share.min.session.timeout.ms", Kind::Int, 1, INT_MAX, "45000")
    },
    Key {
        doc: "Highest share.session.timeout.ms a share group's config may set.",
        ..int("group.share.max.session.timeout.ms", Kind::Int, 1, INT_MAX, "60000")
    },
    Key {
        doc: "Lowest share.heartbeat.interval.ms a share group's config may set.",
        ..int("group.share.min.heartbeat.interval.ms", Kind::Int, 1, INT_MAX, "5000")
    },
    Key {
        doc: "Highest share.heartbeat.interval.ms a share group's config may set.",
        ..int("group.share.max.heartbeat.interval.ms", Kind::Int, 1, INT_MAX, "15000")
    },
    Key {
        doc: "Lowest share.record.lock.duration.ms a share group's config may set.",
        ..int("group.share.min.record.lock.duration.ms", Kind::Int, 1, INT_MAX, "15000")
    },
    Key {
        doc: "Highest share.record.lock.duration.ms a share group's config may set.",
        ..int("group.share.max.record.lock.duration.ms", Kind::Int, 1, INT_MAX, "60000")
    },
    Key {
        doc: "Lowest share.delivery.count.limit a share group's config may set.",
        ..int("group.share.min.delivery.count.limit", Kind::Int, 1, INT_MAX, "2")
    },
    Key {
        doc: "Highest share.delivery.count.limit a share group's config may set.",
        ..int("group.share.max.delivery.count.limit", Kind::Int, 1, INT_MAX, "10")
    },
    Key {
        doc: "Lowest share.partition.max.record.locks a share group's config may set.",
        ..int("group.share.min.partition.max.record.locks", Kind::Int, 1, INT_MAX, "100")
    },
    Key {
        doc: "Highest share.partition.max.record.locks a share group's config may set.",
        ..int("group.share.max.partition.max.record.locks", Kind::Int, 1, INT_MAX, "4000")
    },
    Key {
        doc: "Committed offsets of an empty group are kept this long.",
        ..int("offsets.retention.minutes", Kind::Int, 1, INT_MAX, "10080")
    },
    Key {
        doc: "How often expired offsets are removed.",
        ..int(
            "offsets.retention.check.interval.ms",
            Kind::Long,
            1,
            LONG_MAX,
            "600000",
        )
    },
    Key {
        doc: "Larger commit metadata gets OFFSET_METADATA_TOO_LARGE.",
        ..int("offset.metadata.max.bytes", Kind::Int, 0, INT_MAX, "4096")
    },
    Key {
        shown: Shown::Derived(|c| c.cluster.offsets_topic_replication_factor.to_string()),
        doc: "Replicas of __consumer_offsets when it is created; unset, 3 or the number of voters if fewer (1 on a single node).",
        ..int(
            "offsets.topic.replication.factor",
            Kind::Short,
            1,
            SHORT_MAX,
            "3",
        )
    },
    Key {
        doc: "Partitions of __consumer_offsets when it is created.",
        ..int("offsets.topic.num.partitions", Kind::Int, 1, 10_000, "50")
    },
    Key {
        doc: "segment.bytes of __consumer_offsets when it is created: the active segment the log cleaner leaves alone.",
        ..int("offsets.topic.segment.bytes", Kind::Int, 1, INT_MAX, "104857600")
    },
    Key {
        shown: Shown::Derived(|c| c.cluster.txn_topic_replication_factor.to_string()),
        doc: "Replicas of __transaction_state when it is created; unset, 3 or the number of voters if fewer (1 on a single node).",
        ..int(
            "transaction.state.log.replication.factor",
            Kind::Short,
            1,
            SHORT_MAX,
            "3",
        )
    },
    Key {
        shown: Shown::Derived(|c| c.cluster.txn_topic_min_isr.to_string()),
        doc: "min.insync.replicas of __transaction_state when it is created; unset, 2 or its replication factor if smaller.",
        ..int("transaction.state.log.min.isr", Kind::Int, 1, INT_MAX, "2")
    },
    Key {
        doc: "Partitions of __transaction_state when it is created.",
        ..int("transaction.state.log.num.partitions", Kind::Int, 1, 10_000, "50")
    },
    Key {
        doc: "segment.bytes of __transaction_state when it is created.",
        ..int("transaction.state.log.segment.bytes", Kind::Int, 1, INT_MAX, "104857600")
    },
    Key {
        shown: Shown::Derived(|c| c.cluster.share_topic_replication_factor.to_string()),
        doc: "Replicas of __share_group_state when it is created; unset, 3 or the number of voters if fewer (1 on a single node).",
        ..int(
            "share.coordinator.state.topic.replication.factor",
            Kind::Short,
            1,
            SHORT_MAX,
            "3",
        )
    },
    Key {
        shown: Shown::Derived(|c| c.cluster.share_topic_min_isr.to_string()),
        doc: "min.insync.replicas of __share_group_state when it is created; unset, 2 or its replication factor if smaller.",
        ..int("share.coordinator.state.topic.min.isr", Kind::Int, 1, INT_MAX, "2")
    },
    Key {
        doc: "Partitions of __share_group_state when it is created.",
        ..int("share.coordinator.state.topic.num.partitions", Kind::Int, 1, 10_000, "50")
    },
    Key {
        doc: "segment.bytes of __share_group_state when it is created.",
        ..int("share.coordinator.state.topic.segment.bytes", Kind::Int, 1, INT_MAX, "104857600")
    },
    Key {
        doc: "The longest transaction timeout a producer may ask for; longer gets INVALID_TRANSACTION_TIMEOUT.",
        ..int("transaction.max.timeout.ms", Kind::Int, 1, INT_MAX, "900000")
    },
    Key {
        doc: "A transactional id unused this long with no transaction in flight is removed from __transaction_state.",
        ..int("transactional.id.expiration.ms", Kind::Int, 1, INT_MAX, "604800000")
    },
    Key {
        doc: "How often the transaction coordinator removes expired transactional ids.",
        ..int(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            Kind::Int,
            1,
            INT_MAX,
            "3600000",
        )
    },
    Key {
        doc: "KIP-890 part 1: a leader asks the transaction coordinator before a transaction version 0-1 producer's first batch opens a transaction on a partition (version 2 producers are always checked).",
        ..boolean("transaction.partition.verification.enable", "true")
    },
    Key {
        doc: "How often the transaction coordinator aborts transactions past their timeout.",
        ..int(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            Kind::Int,
            1,
            INT_MAX,
            "10000",
        )
    },
    Key {
        doc: "The roles of this node; only combined mode (broker,controller) is supported.",
        ..text("process.roles", Kind::List)
    },
    Key {
        doc: "The controller quorum as id@host:port entries.",
        ..text("controller.quorum.voters", Kind::List)
    },
    Key {
        doc: "Accepted for Kafka's stock config; the quorum comes from controller.quorum.voters.",
        ..text("controller.quorum.bootstrap.servers", Kind::List)
    },
    Key {
        doc: "Listeners for the quorum, never served to clients.",
        ..text("controller.listener.names", Kind::String)
    },
    Key {
        shown: Shown::Derived(|c| c.inter_broker_listener().to_string()),
        doc: "The listener followers fetch from; by default the first.",
        ..text("inter.broker.listener.name", Kind::String)
    },
    Key {
        doc: "A broker without a heartbeat for this long is fenced.",
        ..int("broker.session.timeout.ms", Kind::Int, 1, INT_MAX, "9000")
    },
    Key {
        doc: "How often a broker heartbeats to the controller.",
        ..int(
            "broker.heartbeat.interval.ms",
            Kind::Int,
            1,
            INT_MAX,
            "2000",
        )
    },
    Key {
        doc: "A follower not caught up for this long leaves the ISR.",
        ..int("replica.lag.time.max.ms", Kind::Long, 1, LONG_MAX, "30000")
    },
    Key {
        doc: "Elect an out-of-sync replica when no in-sync one is left, losing records.",
        ..boolean("unclean.leader.election.enable", "false")
    },
    Key {
        doc: "Move leadership back to preferred replicas.",
        ..boolean("auto.leader.rebalance.enable", "true")
    },
    Key {
        doc: "How often the controller checks leadership balance.",
        ..int(
            "leader.imbalance.check.interval.seconds",
            Kind::Long,
            1,
            86_400 * 365,
            "300",
        )
    },
    Key {
        doc: "Share of lost leaderships a broker may have before a rebalance.",
        ..int(
            "leader.imbalance.per.broker.percentage",
            Kind::Int,
            0,
            100,
            "10",
        )
    },
    Key {
        default: Some("0.0.0.0:9644"),
        doc: "HTTP address of /metrics, /health and /ready; none turns it off.",
        ..text("metrics.listener", Kind::String)
    },
    Key {
        doc: "Export per-partition series; false keeps per-topic and per-group ones only.",
        ..boolean("metrics.partition.series.enable", "true")
    },
];

pub fn lookup(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// The key behind a per-listener key, `listener.name.<listener>.<key>`, for the keys a
/// listener may set for itself: the `ssl.*` ones, `sasl.enabled.mechanisms`,
/// `<mechanism>.sasl.jaas.config`, `[<mechanism>.]connections.max.reauth.ms`,
/// `max.connections` and `max.connection.creation.rate`.
pub fn listener_key(name: &str) -> Option<&'static Key> {
    let rest = name.strip_prefix("listener.name.")?;
    let (_, key) = rest.split_once('.')?;
    if key.ends_with(".sasl.jaas.config") {
        return lookup("sasl.jaas.config");
    }
    if key.ends_with("connections.max.reauth.ms") {
        return lookup("connections.max.reauth.ms");
    }
    lookup(key).filter(|k| {
        k.name.starts_with("ssl.")
            || [
                "sasl.enabled.mechanisms",
                "max.connections",
                "max.connection.creation.rate",
            ]
            .contains(&k.name)
    })
}

/// A checked value: a number for [`Check::Int`], 0 or 1 for [`Check::Bool`], 0 for text.
pub fn parse(k: &Key, value: &str) -> Result<i64, super::ConfigError> {
    let bad = |reason: &str| super::invalid(k.name, value, reason);
    match k.check {
        Check::Int { min, max } => {
            let n: i64 = value.parse().map_err(|_| bad("expected a whole number"))?;
            if n < min || n > max {
                return Err(bad(&format!("must be between {min} and {max}")));
            }
            Ok(n)
        }
        Check::Bool if value.eq_ignore_ascii_case("true") => Ok(1),
        Check::Bool if value.eq_ignore_ascii_case("false") => Ok(0),
        Check::Bool => Err(bad("expected true or false")),
        Check::Text => Ok(0),
    }
}

/// [`parse`] for a value set as `given`, which names `k` or is `k` behind a listener
/// prefix: an error names `given`, as the operator wrote it.
fn parse_as(k: &Key, given: &str, value: &str) -> Result<i64, super::ConfigError> {
    parse(k, value).map_err(|e| match e {
        super::ConfigError::Invalid { value, reason, .. } => super::ConfigError::Invalid {
            key: given.to_string(),
            value,
            reason,
        },
        other => other,
    })
}

/// A value as Kafka prints it: numbers without padding, booleans lower-case.
fn normalized(k: &Key, value: &str) -> String {
    match (k.check, parse(k, value)) {
        (Check::Int { .. }, Ok(n)) => n.to_string(),
        (Check::Bool, Ok(b)) => (b == 1).to_string(),
        _ => value.to_string(),
    }
}

/// One synonym of a described key: a key, its value and where that value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synonym {
    pub name: &'static str,
    pub value: String,
    pub source: Source,
}

/// A broker key as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub value: Option<String>,
    pub source: Source,
    /// Strongest first: keys set in the config (STATIC_BROKER_CONFIG), then defaults.
    pub synonyms: Vec<Synonym>,
}

/// Describes `k` as Kafka's `ConfigHelper.createBrokerConfigEntry` does for a static
/// config: the synonyms set explicitly, then those with a default; the first decides the
/// source. Unlike Kafka, `log.retention.ms` shows the retention in force even when only
/// `.hours` or `.minutes` is set (Kafka shows null), with the key that set it among its
/// synonyms, because that is the value topics inherit.
pub fn describe(k: &Key, c: &Config) -> Described {
    let group: &[&str] = if k.synonyms.is_empty() {
        std::slice::from_ref(&k.name)
    } else {
        k.synonyms
    };
    let members = || group.iter().filter_map(|n| lookup(n));
    // Kafka lists a key's synonyms layer by layer, the strongest layer first.
    let layers = [
        (&c.layers.broker, Source::DynamicBroker),
        (&c.layers.cluster, Source::DynamicDefaultBroker),
        (&c.layers.static_, Source::StaticBroker),
    ];
    let explicit = layers.into_iter().flat_map(|(layer, source)| {
        members().filter_map(move |m| {
            layer.get(m.name).map(|v| Synonym {
                name: m.name,
                value: normalized(m, v.trim()),
                source,
            })
        })
    });
    let defaults = members().filter_map(|m| {
        m.default.map(|d| Synonym {
            name: m.name,
            value: d.to_string(),
            source: Source::Default,
        })
    });
    let synonyms: Vec<Synonym> = explicit.chain(defaults).collect();
    let source = synonyms.first().map_or(Source::Default, |s| s.source);
    let value = match k.shown {
        Shown::Derived(show) => Some(show(c)),
        Shown::Given => synonyms.first().map(|s| s.value.clone()),
    };
    Described {
        value,
        source,
        synonyms,
    }
}

/// The values of the keys set explicitly, for the parsers: a key's value or its default.
pub(super) struct Props<'a>(pub &'a BTreeMap<String, String>);

impl Props<'_> {
    /// Checks every known key that was set, so a bad value stops start-up even where a
    /// stronger synonym wins (as in Kafka), and logs the keys Cairn does not know.
    pub fn checked(props: &BTreeMap<String, String>) -> Result<Props<'_>, super::ConfigError> {
        for (name, value) in props {
            match lookup(name).or_else(|| listener_key(name)) {
                Some(k) => {
                    parse_as(k, name, value.trim())?;
                }
                None => tracing::warn!(key = %name, "unknown or unsupported config key ignored"),
            }
        }
        Ok(Props(props))
    }

    /// The value set for `key`, trimmed; `None` when it was not set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|s| s.trim())
    }

    /// The text set for `name`, else its default, else empty.
    pub fn text(&self, name: &str) -> &str {
        self.get(name)
            .or(Self::key(name).default)
            .unwrap_or_default()
    }

    /// Which of `group` (synonyms, strongest first) decides the setting: the first that
    /// was set, else the first with a default.
    pub fn winner(&self, group: &[&'static str]) -> &'static str {
        group
            .iter()
            .find(|n| self.get(n).is_some())
            .or_else(|| group.iter().find(|n| Self::key(n).default.is_some()))
            .unwrap_or(&group[0])
    }

    fn key(name: &str) -> &'static Key {
        // Only the parsers in this module ask, with names from the table; the table test
        // proves every name they use exists.
        lookup(name).unwrap_or_else(|| panic!("{name} is not in config::keys::KEYS"))
    }

    /// The number set for `name`, else its default; `None` for a key without a default.
    pub fn int_opt(&self, name: &str) -> Result<Option<i64>, super::ConfigError> {
        let k = Self::key(name);
        match self.get(name).or(k.default) {
            Some(v) => parse(k, v).map(Some),
            None => Ok(None),
        }
    }

    /// The number set under the first of `keys` that is set (prefixed forms of `name`,
    /// strongest first), checked by `name`'s rule; else `name`'s own number or default.
    pub fn int_first(&self, keys: &[String], name: &str) -> Result<i64, super::ConfigError> {
        match keys.iter().find_map(|k| Some((k, self.get(k)?))) {
            Some((given, v)) => parse_as(Self::key(name), given, v),
            None => self.int(name),
        }
    }

    /// The number set for `name`, else its default.
    pub fn int(&self, name: &str) -> Result<i64, super::ConfigError> {
        Ok(self.int_opt(name)?.unwrap_or_default())
    }

    /// The boolean set for `name`, else its default.
    pub fn bool(&self, name: &str) -> Result<bool, super::ConfigError> {
        Ok(self.int(name)? == 1)
    }

    /// The comma-separated entries set for `name`, trimmed, empty ones dropped.
    pub fn list(&self, name: &str) -> Vec<String> {
        self.get(name)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(overrides: &[&str]) -> Config {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Config::load(None, Vec::new(), &o).unwrap()
    }

    #[test]
    fn dynamic_keys_are_keys_and_describe_names_their_layer() {
        for name in DYNAMIC {
            assert!(lookup(name).is_some(), "{name}");
        }
        let c = load(&["log.retention.hours=2"])
            .with_dynamic(
                BTreeMap::from([("log.retention.hours".into(), "3".into())]),
                BTreeMap::from([("log.retention.hours".into(), "4".into())]),
            )
            .unwrap();
        assert_eq!(c.log_retention_ms, 4 * 3_600_000);
        let d = describe(lookup("log.retention.hours").unwrap(), &c);
        assert_eq!(d.value.as_deref(), Some("4"));
        assert_eq!(d.source, Source::DynamicBroker);
        let layers: Vec<(&str, Source)> = d
            .synonyms
            .iter()
            .map(|s| (s.value.as_str(), s.source))
            .collect();
        assert_eq!(
            layers,
            [
                ("4", Source::DynamicBroker),
                ("3", Source::DynamicDefaultBroker),
                ("2", Source::StaticBroker),
                ("168", Source::Default)
            ]
        );
        let e = load(&[])
            .with_dynamic(
                BTreeMap::from([("log.cleaner.threads".into(), "many".into())]),
                BTreeMap::new(),
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("log.cleaner.threads") && e.contains("many"),
            "{e}"
        );
    }

    #[test]
    fn the_table_is_consistent() {
        let mut seen = std::collections::BTreeSet::new();
        for k in KEYS {
            assert!(seen.insert(k.name), "{} is listed twice", k.name);
            assert!(!k.doc.is_empty(), "{} has no documentation", k.name);
            if let Some(d) = k.default {
                assert!(parse(k, d).is_ok(), "default of {} fails its check", k.name);
            }
            // A number without a default is read only where a synonym group picks it
            // because it was set (Props::winner); elsewhere it would silently read as 0.
            if matches!(k.check, Check::Int { .. }) && k.default.is_none() {
                let in_group = KEYS.iter().any(|g| g.synonyms.contains(&k.name));
                assert!(in_group, "{} has no default and no synonyms", k.name);
            }
            for s in k.synonyms {
                assert!(
                    lookup(s).is_some(),
                    "synonym {s} of {} is not a key",
                    k.name
                );
            }
            assert!(
                k.synonyms.is_empty() || k.synonyms.contains(&k.name),
                "{} must be among its own synonyms",
                k.name
            );
        }
        // Every key the parsers read is in the table (Props::key panics otherwise).
        let c = load(&[]);
        for k in KEYS {
            describe(k, &c);
        }
    }

    #[test]
    fn every_accepted_key_is_described_with_a_value_or_null_by_kafkas_rule() {
        let c = load(&[]);
        for k in KEYS {
            let d = describe(k, &c);
            assert_eq!(d.source, Source::Default, "{}", k.name);
            let nullable = ["log.dir", "log.retention.minutes"];
            let optional_text = k.check == Check::Text && k.default.is_none();
            assert!(
                d.value.is_some() || nullable.contains(&k.name) || optional_text,
                "{} has no value",
                k.name
            );
        }
        let d = describe(lookup("unclean.leader.election.enable").unwrap(), &c);
        assert_eq!(d.value.as_deref(), Some("false"));
        let d = describe(lookup("replica.lag.time.max.ms").unwrap(), &c);
        assert_eq!(d.value.as_deref(), Some("30000"));
    }

    #[test]
    fn retention_synonyms_list_the_set_key_then_the_default() {
        let c = load(&["log.retention.hours=2"]);
        let d = describe(lookup("log.retention.ms").unwrap(), &c);
        assert_eq!(d.value.as_deref(), Some("7200000"));
        assert_eq!(d.source, Source::StaticBroker);
        let names: Vec<(&str, &str, Source)> = d
            .synonyms
            .iter()
            .map(|s| (s.name, s.value.as_str(), s.source))
            .collect();
        assert_eq!(
            names,
            vec![
                ("log.retention.hours", "2", Source::StaticBroker),
                ("log.retention.hours", "168", Source::Default),
            ]
        );
        let d = describe(lookup("log.retention.hours").unwrap(), &c);
        assert_eq!(d.value.as_deref(), Some("2"));
        let d = describe(lookup("log.retention.minutes").unwrap(), &c);
        assert_eq!((d.value, d.source), (None, Source::Default));

        let c = load(&["log.retention.ms=5", "log.retention.minutes=3"]);
        let d = describe(lookup("log.retention.ms").unwrap(), &c);
        let names: Vec<&str> = d.synonyms.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            vec![
                "log.retention.ms",
                "log.retention.minutes",
                "log.retention.hours"
            ]
        );
        assert_eq!(d.value.as_deref(), Some("5"));
    }

    #[test]
    fn node_id_and_broker_id_are_one_setting() {
        let c = load(&["broker.id=7"]);
        for name in ["node.id", "broker.id"] {
            let d = describe(lookup(name).unwrap(), &c);
            assert_eq!(d.value.as_deref(), Some("7"), "{name}");
            assert_eq!(d.source, Source::StaticBroker, "{name}");
            assert_eq!(d.synonyms[0].name, "broker.id");
            assert_eq!(d.synonyms[1].name, "node.id");
            assert_eq!(d.synonyms[1].source, Source::Default);
        }
        let c = load(&["log.dir=/x"]);
        let d = describe(lookup("log.dirs").unwrap(), &c);
        assert_eq!(d.value.as_deref(), Some("/x"));
        assert_eq!(d.source, Source::StaticBroker);
    }

    #[test]
    fn given_values_are_printed_as_kafka_prints_them() {
        let c = load(&["auto.create.topics.enable=FALSE", "num.partitions= 3"]);
        let d = describe(lookup("auto.create.topics.enable").unwrap(), &c);
        assert_eq!(d.value.as_deref(), Some("false"));
        let d = describe(lookup("num.partitions").unwrap(), &c);
        assert_eq!(d.value.as_deref(), Some("3"));
        assert_eq!(d.source, Source::StaticBroker);
    }

    /// The config keys named in the first column of README.md's "Running and configuring"
    /// table.
    fn readme_keys() -> Vec<String> {
        let readme = include_str!("../../README.md");
        let section = readme
            .split("## Running and configuring")
            .nth(1)
            .expect("README has a Running and configuring section");
        let section = section.split("\n## ").next().unwrap_or_default();
        section
            .lines()
            .filter(|l| l.starts_with("| `"))
            .filter_map(|l| l.split('|').nth(1))
            .flat_map(|cell| {
                cell.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn readme_documents_every_key_and_only_keys() {
        let documented = readme_keys();
        for k in KEYS {
            assert!(
                documented.iter().any(|d| d == k.name),
                "{} is accepted but missing from README.md's config table",
                k.name
            );
        }
        for d in &documented {
            assert!(
                lookup(d).is_some(),
                "README.md's config table documents {d}, which Cairn does not accept"
            );
        }
    }
}
