//! Broker configuration: a `server.properties` file, `KAFKA_*` environment variables and
//! `--override key=value` flags, merged in that order (later wins) into one typed [`Config`].
//!
//! Keys and defaults are Kafka's, so an existing `server.properties` works unchanged. Keys
//! Cairn does not know are logged and ignored; a known key with a bad value stops start-up
//! with a message naming the key (see [`ConfigError`]).
//!
//! Every key Cairn accepts is one row of [`keys::KEYS`]: its check, default, type,
//! synonyms and documentation. The listener and KRaft keys, which are checked against each
//! other, are read in `cluster`.

mod cluster;
pub mod keys;
pub mod limits;
pub mod sasl;
pub mod ssl;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use keys::Props;

/// A configuration problem, reported to the operator before the broker starts.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid value '{value}' for {key}: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    #[error("bad override '{0}': expected key=value")]
    BadOverride(String),
}

/// One listener the broker accepts Kafka clients on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Listener {
    pub fn bind_addr(&self) -> String {
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        format!("{host}:{}", self.port)
    }
}

/// The SASL side of a controller listener.
#[derive(Debug, Clone)]
pub struct ControllerSasl {
    pub accepted: std::sync::Arc<crate::security::sasl::Accepted>,
    pub login: sasl::Login,
}

/// A member of the controller quorum (`controller.quorum.voters`: `id@host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

/// Kafka's KRaft keys, as a combined-mode (`process.roles=broker,controller`) node reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `process.roles`; empty when unset (a single node, as before KRaft keys).
    pub process_roles: Vec<String>,
    /// `controller.quorum.voters`; empty when unset.
    pub voters: Vec<Voter>,
    /// `controller.listener.names`: listeners for the quorum, never served to clients.
    pub controller_listener_names: Vec<String>,
    /// The controller listeners taken out of `listeners`.
    pub controller_listeners: Vec<Listener>,
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.num.partitions`: partitions of `__consumer_offsets` when created.
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.segment.bytes`, `transaction.state.log.segment.bytes` and
    /// `share.coordinator.state.topic.segment.bytes`: the internal topics' `segment.bytes`
    /// when created.
    pub offsets_topic_segment_bytes: i32,
    pub txn_topic_segment_bytes: i32,
    pub share_topic_segment_bytes: i32,
    /// `transaction.state.log.*`: `__transaction_state` when created.
    pub txn_topic_replication_factor: i16,
    pub txn_topic_min_isr: i32,
    pub txn_topic_num_partitions: i32,
    /// `share.coordinator.state.topic.*`: `__share_group_state` when created.
    pub share_topic_replication_factor: i16,
    pub share_topic_min_isr: i32,
    pub share_topic_num_partitions: i32,
    /// `transaction.max.timeout.ms`
    pub transaction_max_timeout_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub transaction_abort_interval_ms: u64,
    /// `transactional.id.expiration.ms`
    pub transactional_id_expiration_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`
    pub transaction_id_expiration_check_ms: u64,
    /// `transaction.partition.verification.enable`
    pub transaction_partition_verification: bool,
    pub unclean_leader_election_enable: bool,
    /// `auto.leader.rebalance.enable`, `leader.imbalance.check.interval.seconds`,
    /// `leader.imbalance.per.broker.percentage`: the controller moves leadership back to
    /// preferred replicas on brokers whose share of lost leaderships is above the percentage.
    pub auto_leader_rebalance: Option<(std::time::Duration, u32)>,
    pub replica_lag_time_max_ms: u64,
    pub broker_session_timeout_ms: u64,
    pub broker_heartbeat_interval_ms: u64,
    /// `inter.broker.listener.name`: the listener followers fetch from (default: the first).
    pub inter_broker_listener_name: Option<String>,
}

impl Config {
    /// The listener brokers replicate over: `inter.broker.listener.name`, else the first.
    pub fn inter_broker_listener(&self) -> &str {
        inter_broker_name(&self.cluster, &self.advertised_listeners)
    }
}

fn inter_broker_name<'a>(cluster: &'a ClusterConfig, advertised: &'a [Listener]) -> &'a str {
    cluster
        .inter_broker_listener_name
        .as_deref()
        .unwrap_or(&advertised[0].name)
}

/// The broker's typed configuration. Units are in the names.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_id: i32,
    pub listeners: Vec<Listener>,
    pub advertised_listeners: Vec<Listener>,
    /// `listener.security.protocol.map` as given, or Kafka's default derived from
    /// `controller.listener.names`: listener name to security protocol.
    pub listener_security_protocol_map: BTreeMap<String, String>,
    /// The TLS settings of each client listener whose protocol is SSL or SASL_SSL, by
    /// listener name.
    pub ssl: BTreeMap<String, ssl::Ssl>,
    /// The TLS settings of an SSL or SASL_SSL controller listener: the quorum's connections (between
    /// voters, and brokers' requests to the controller) use both of its sides.
    pub controller_ssl: Option<ssl::Ssl>,
    /// What each SASL_PLAINTEXT or SASL_SSL client listener accepts, by listener name.
    pub sasl: BTreeMap<String, std::sync::Arc<crate::security::sasl::Accepted>>,
    /// How this broker logs in to the others, in a cluster whose inter-broker listener is
    /// SASL_PLAINTEXT or SASL_SSL.
    pub inter_broker_login: Option<sasl::Login>,
    /// A SASL_PLAINTEXT or SASL_SSL controller listener of a cluster: what it accepts, and
    /// how this node logs in to the other voters.
    pub controller_sasl: Option<ControllerSasl>,
    /// The StandardAuthorizer's settings when `authorizer.class.name` names it; `None`:
    /// no authorizer, every client may do everything.
    pub authorizer: Option<std::sync::Arc<crate::security::acl::Settings>>,
    /// `log.dirs`: the first also holds topics, groups and other metadata; partitions are
    /// spread over all of them.
    pub log_dirs: Vec<PathBuf>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub message_bytes_max: i32,
    pub socket_request_bytes_max: i32,
    /// `socket.listen.backlog.size`: listen(2)'s backlog for each client listener.
    pub socket_listen_backlog: u32,
    /// `fetch.max.bytes`: the most a Fetch or ShareFetch answer carries (Kafka caps the
    /// request's MaxBytes with it).
    pub fetch_response_bytes_max: usize,
    /// `fetch.memory.max.bytes`: fetched records held in memory until sent, broker-wide.
    pub fetch_memory_bytes_max: usize,
    /// `log.store.direct.writes`: the stores' flushes and compactions write around the
    /// page cache.
    pub store_direct_writes: bool,
    /// `connections.max.idle.ms`: a client connection with no request for so long closes,
    /// and so does one whose responses wait with none written for so long (`None`: set
    /// negative, never).
    pub connections_max_idle_ms: Option<u64>,
    /// `max.connections`, per listener too, and `max.connections.per.ip[.overrides]`.
    pub connection_limits: limits::ConnectionLimits,
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    pub log_retention_check_interval_ms: u64,
    /// The log cleaner: `log.cleaner.enable`, `.threads`, `.io.max.bytes.per.second`,
    /// `.backoff.ms`, `.dedupe.buffer.size`.
    pub log_cleaner_enable: bool,
    pub log_cleaner_threads: usize,
    pub log_cleaner_io_bytes_per_sec: f64,
    pub log_cleaner_backoff_ms: u64,
    pub log_cleaner_dedupe_buffer_bytes: usize,
    /// `producer.id.expiration.ms`, `producer.id.expiration.check.interval.ms`
    pub producer_id_expiration_ms: i64,
    pub producer_id_expiration_check_ms: u64,
    pub min_insync_replicas: i32,
    pub delete_topic_enable: bool,
    /// Consumer groups (Kafka's `group.*` and `offsets.*` keys).
    pub group_initial_rebalance_delay_ms: u64,
    pub group_min_session_timeout_ms: u64,
    pub group_max_session_timeout_ms: u64,
    pub group_consumer_session_timeout_ms: u64,
    pub group_consumer_heartbeat_interval_ms: u64,
    /// Share groups (KIP-932): membership, then the share partitions' limits.
    pub group_share_session_timeout_ms: u64,
    pub group_share_heartbeat_interval_ms: u64,
    pub group_share_record_lock_duration_ms: i64,
    pub group_share_delivery_count_limit: i16,
    pub group_share_partition_max_record_locks: i64,
    pub offsets_retention_ms: u64,
    pub offsets_retention_check_interval_ms: u64,
    pub offset_metadata_bytes_max: usize,
    /// Where `/metrics` will be served (parsed now so a bad value fails start-up).
    pub metrics_listener: Option<SocketAddr>,
    /// `metrics.partition.series.enable`: export per-partition series (log size, offsets,
    /// per-partition lag); off bounds cardinality to per-topic and per-group series.
    pub metrics_partition_series: bool,
    /// KRaft's cluster keys (`process.roles`, `controller.quorum.voters`, ...).
    pub cluster: ClusterConfig,
    /// Every key that was set, with the value in force: the static ones (file, environment
    /// or override) and, over them, the dynamic ones of [`Self::dynamic`].
    pub explicit: BTreeMap<String, String>,
    /// Where the keys of `explicit` were set: static, or in the cluster metadata.
    pub layers: Layers,
}

/// The layers a broker's settings come from, as Kafka's `DynamicBrokerConfig` stacks them:
/// this broker's dynamic configs (`kafka-configs --entity-type brokers --entity-name ID`)
/// over the cluster's dynamic defaults (`--entity-default`) over the static ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layers {
    pub broker: BTreeMap<String, String>,
    pub cluster: BTreeMap<String, String>,
    pub static_: BTreeMap<String, String>,
}

/// Environment variables of the apache/kafka image that configure the JVM, not the broker.
const ENV_NOT_CONFIG: &[&str] = &[
    "KAFKA_HEAP_OPTS",
    "KAFKA_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS",
    "KAFKA_LOG4J_OPTS",
    "KAFKA_JMX_OPTS",
    "KAFKA_GC_LOG_OPTS",
    "KAFKA_DEBUG",
    "KAFKA_VERSION",
    "KAFKA_URI",
    "KAFKA_PATH",
    "KAFKA_HOME",
];

/// Maps `KAFKA_LOG_DIRS` to `log.dirs` as the apache/kafka image does:
/// `___` -> `-`, `__` -> `_`, `_` -> `.`, lower-cased.
pub fn env_key(var: &str) -> Option<String> {
    let rest = var.strip_prefix("KAFKA_")?;
    if rest.is_empty() || ENV_NOT_CONFIG.contains(&var) {
        return None;
    }
    let key = rest
        .to_ascii_lowercase()
        .replace("___", "\u{1}")
        .replace("__", "\u{2}")
        .replace('_', ".")
        .replace('\u{1}', "-")
        .replace('\u{2}', "_");
    Some(key)
}

/// Parses Java `.properties` text: `key=value`, `key: value` or `key value`, `#`/`!`
/// comments, backslash line continuations and escapes.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    for raw in text.lines() {
        // continuation lines drop their leading whitespace, like first lines
        let line = raw.trim_start();
        if logical.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        // An odd number of trailing backslashes continues the line.
        let trailing = line.chars().rev().take_while(|c| *c == '\\').count();
        if trailing % 2 == 1 {
            logical.push_str(&line[..line.len() - 1]);
            continue;
        }
        logical.push_str(line);
        let (key, value) = split_property(&logical);
        out.insert(key, value);
        logical.clear();
    }
    if !logical.is_empty() {
        let (key, value) = split_property(&logical);
        out.insert(key, value);
    }
    out
}

fn split_property(line: &str) -> (String, String) {
    let mut key = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    key.push(unescape(n));
                }
            }
            '=' | ':' => break,
            c if c.is_whitespace() => {
                while matches!(chars.peek(), Some(c) if c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('=') | Some(':')) {
                    chars.next();
                }
                break;
            }
            c => key.push(c),
        }
    }
    while matches!(chars.peek(), Some(c) if c.is_whitespace()) {
        chars.next();
    }
    let mut value = String::new();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                value.push(unescape(n));
            }
        } else {
            value.push(c);
        }
    }
    (key, value.trim_end().to_string())
}

fn unescape(c: char) -> char {
    match c {
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        'f' => '\u{c}',
        other => other,
    }
}

impl Config {
    /// The number in force for `name`, a numeric key of [`keys::KEYS`] with a default: as
    /// set (checked at start-up), else its default. For settings read where they are used
    /// rather than kept in a field (the bounds of group configs).
    pub fn number(&self, name: &str) -> i64 {
        let k = keys::lookup(name).unwrap_or_else(|| panic!("{name} is not a config key"));
        self.explicit
            .get(name)
            .map(|v| v.trim())
            .or(k.default)
            .and_then(|v| keys::parse(k, v).ok())
            .unwrap_or_default()
    }

    /// Loads the configuration as `cairn [file] [--override k=v]...` sees it.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &[String],
    ) -> Result<Config, ConfigError> {
        let mut props = BTreeMap::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            props.extend(parse_properties(&text));
        }
        for (var, value) in env {
            if let Some(key) = env_key(&var) {
                props.insert(key, value);
            }
        }
        for o in overrides {
            let (k, v) = o
                .split_once('=')
                .ok_or_else(|| ConfigError::BadOverride(o.clone()))?;
            if k.trim().is_empty() {
                return Err(ConfigError::BadOverride(o.clone()));
            }
            props.insert(k.trim().to_string(), v.trim().to_string());
        }
        Config::from_props(props)
    }

    /// Builds a config from merged key/value pairs. Every known key that was set is checked
    /// against [`keys::KEYS`] first; then each setting is read, its default coming from the
    /// same table, and the rules between keys are checked.
    pub fn from_props(props: BTreeMap<String, String>) -> Result<Config, ConfigError> {
        let p = Props::checked(&props)?;
        let node_id = p.int(p.winner(&["node.id", "broker.id"]))? as i32;
        let listeners = cluster::parse_listeners(&p)?;
        let cluster = cluster::parse(&p, node_id, &listeners)?;
        let (group_min_session_timeout_ms, group_max_session_timeout_ms) = group_sessions(&p)?;
        let log_cleaner_io_bytes_per_sec = check_cleaner_defaults(&p)?;
        let (ssl, controller_ssl) = tls_listeners(&p, &listeners)?;
        let sasl = sasl_listeners(&p, &listeners)?;
        let inter_broker_login = inter_broker_login(&p, &cluster, &listeners, &sasl)?;
        let controller_sasl = controller_sasl(&p, &cluster, &listeners)?;
        let listeners_names: Vec<String> =
            listeners.client.iter().map(|l| l.name.clone()).collect();
        Ok(Config {
            node_id,
            listeners: listeners.client,
            advertised_listeners: listeners.advertised,
            listener_security_protocol_map: listeners.protocol_map,
            ssl,
            controller_ssl,
            sasl,
            inter_broker_login,
            controller_sasl,
            authorizer: authorizer(&p)?,
            log_dirs: log_dirs(&p)?,
            num_partitions: p.int("num.partitions")? as i32,
            default_replication_factor: p.int("default.replication.factor")? as i16,
            auto_create_topics_enable: p.bool("auto.create.topics.enable")?,
            message_bytes_max: p.int("message.max.bytes")? as i32,
            socket_request_bytes_max: p.int("socket.request.max.bytes")? as i32,
            socket_listen_backlog: p.int("socket.listen.backlog.size")? as u32,
            fetch_response_bytes_max: p.int("fetch.max.bytes")? as usize,
            fetch_memory_bytes_max: p.int("fetch.memory.max.bytes")? as usize,
            store_direct_writes: p.bool("log.store.direct.writes")?,
            connections_max_idle_ms: u64::try_from(p.int("connections.max.idle.ms")?).ok(),
            connection_limits: limits::parse(&p, &listeners_names)?,
            log_retention_ms: log_retention_ms(&p)?,
            log_retention_bytes: p.int("log.retention.bytes")?,
            log_retention_check_interval_ms: p.int("log.retention.check.interval.ms")? as u64,
            log_cleaner_enable: p.bool("log.cleaner.enable")?,
            log_cleaner_threads: p.int("log.cleaner.threads")? as usize,
            log_cleaner_io_bytes_per_sec,
            log_cleaner_backoff_ms: p.int("log.cleaner.backoff.ms")? as u64,
            log_cleaner_dedupe_buffer_bytes: p.int("log.cleaner.dedupe.buffer.size")? as usize,
            producer_id_expiration_ms: p.int("producer.id.expiration.ms")?,
            producer_id_expiration_check_ms: p.int("producer.id.expiration.check.interval.ms")?
                as u64,
            min_insync_replicas: p.int("min.insync.replicas")? as i32,
            delete_topic_enable: p.bool("delete.topic.enable")?,
            group_initial_rebalance_delay_ms: p.int("group.initial.rebalance.delay.ms")? as u64,
            group_min_session_timeout_ms,
            group_max_session_timeout_ms,
            group_consumer_session_timeout_ms: p.int("group.consumer.session.timeout.ms")? as u64,
            group_consumer_heartbeat_interval_ms: p.int("group.consumer.heartbeat.interval.ms")?
                as u64,
            group_share_session_timeout_ms: p.int("group.share.session.timeout.ms")? as u64,
            group_share_heartbeat_interval_ms: p.int("group.share.heartbeat.interval.ms")? as u64,
            group_share_record_lock_duration_ms: p.int("group.share.record.lock.duration.ms")?,
            group_share_delivery_count_limit: p.int("group.share.delivery.count.limit")? as i16,
            group_share_partition_max_record_locks: p
                .int("group.share.partition.max.record.locks")?,
            offsets_retention_ms: p.int("offsets.retention.minutes")? as u64 * 60_000,
            offsets_retention_check_interval_ms: p.int("offsets.retention.check.interval.ms")?
                as u64,
            offset_metadata_bytes_max: p.int("offset.metadata.max.bytes")? as usize,
            metrics_listener: metrics_listener(&p)?,
            metrics_partition_series: p.bool("metrics.partition.series.enable")?,
            cluster,
            explicit: props.clone(),
            layers: Layers {
                static_: props.clone(),
                ..Layers::default()
            },
        })
    }

    /// This config with the dynamic configs `cluster` (the cluster's defaults) and `broker`
    /// (this broker's own) over its static ones, as Kafka merges them: one set of
    /// properties, read again, so a bad dynamic value fails here with its key named.
    pub fn with_dynamic(
        &self,
        cluster: BTreeMap<String, String>,
        broker: BTreeMap<String, String>,
    ) -> Result<Config, ConfigError> {
        let static_ = self.layers.static_.clone();
        let mut props = static_.clone();
        props.extend(cluster.iter().map(|(k, v)| (k.clone(), v.clone())));
        props.extend(broker.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut c = Config::from_props(props)?;
        c.layers = Layers {
            broker,
            cluster,
            static_,
        };
        Ok(c)
    }
}

/// `log.dirs`, else `log.dir`: a comma-separated list without repeats.
fn log_dirs(p: &Props<'_>) -> Result<Vec<PathBuf>, ConfigError> {
    let v = p.text(p.winner(&["log.dirs", "log.dir"]));
    let dirs: Vec<PathBuf> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    if dirs.is_empty() {
        return Err(invalid("log.dirs", v, "no directory given"));
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(dup) = dirs.iter().find(|d| !seen.insert(*d)) {
        return Err(invalid(
            "log.dirs",
            v,
            &format!("{} is listed twice", dup.display()),
        ));
    }
    Ok(dirs)
}

/// The strongest of `log.retention.ms`, `.minutes` and `.hours` that is set, in ms.
fn log_retention_ms(p: &Props<'_>) -> Result<i64, ConfigError> {
    let name = p.winner(&[
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    ]);
    let ms_per_unit = match name {
        "log.retention.minutes" => 60_000,
        "log.retention.hours" => 3_600_000,
        _ => 1,
    };
    // -1 (keep forever) stays -1 in every unit.
    Ok(p.int(name)?.saturating_mul(ms_per_unit).max(-1))
}

/// `log.cleanup.policy` names `delete` and/or `compact`; `log.cleaner.min.cleanable.ratio`
/// is a number from 0 to 1 (topics inherit both, so a bad value must stop start-up). Returns
/// `log.cleaner.io.max.bytes.per.second`, a positive number.
fn check_cleaner_defaults(p: &Props<'_>) -> Result<f64, ConfigError> {
    let policy = p.text("log.cleanup.policy");
    let names: Vec<&str> = policy.split(',').map(str::trim).collect();
    if names.is_empty() || names.iter().any(|n| *n != "delete" && *n != "compact") {
        return Err(invalid(
            "log.cleanup.policy",
            policy,
            "expected delete, compact or both, comma-separated",
        ));
    }
    let ratio = p.text("log.cleaner.min.cleanable.ratio");
    if !ratio
        .trim()
        .parse::<f64>()
        .is_ok_and(|r| (0.0..=1.0).contains(&r))
    {
        return Err(invalid(
            "log.cleaner.min.cleanable.ratio",
            ratio,
            "expected a number from 0 to 1",
        ));
    }
    let io = p.text("log.cleaner.io.max.bytes.per.second");
    match io.trim().parse::<f64>() {
        Ok(rate) if rate > 0.0 => Ok(rate),
        _ => Err(invalid(
            "log.cleaner.io.max.bytes.per.second",
            io,
            "expected a number of bytes above 0",
        )),
    }
}

fn metrics_listener(p: &Props<'_>) -> Result<Option<SocketAddr>, ConfigError> {
    match p.text("metrics.listener") {
        "" | "none" => Ok(None),
        v => v.parse().map(Some).map_err(|_| {
            invalid(
                "metrics.listener",
                v,
                "expected host:port, e.g. 0.0.0.0:9644",
            )
        }),
    }
}

/// `group.min.session.timeout.ms` and `group.max.session.timeout.ms`, min not above max.
fn group_sessions(p: &Props<'_>) -> Result<(u64, u64), ConfigError> {
    let min = p.int("group.min.session.timeout.ms")? as u64;
    let max = p.int("group.max.session.timeout.ms")? as u64;
    if max < min {
        return Err(invalid(
            "group.max.session.timeout.ms",
            &max.to_string(),
            "must not be below group.min.session.timeout.ms",
        ));
    }
    Ok((min, max))
}

/// The `ssl.*` settings of every SSL or SASL_SSL listener, the controller listener's apart.
fn tls_listeners(
    p: &Props<'_>,
    listeners: &cluster::Listeners,
) -> Result<(BTreeMap<String, ssl::Ssl>, Option<ssl::Ssl>), ConfigError> {
    let tls = |name: &str| {
        matches!(
            listeners.protocol_map.get(name).map(String::as_str),
            Some("SSL" | "SASL_SSL")
        )
    };
    let controller = match listeners.controller.iter().find(|l| tls(&l.name)) {
        Some(l) => Some(ssl::parse(p, &l.name)?),
        None => None,
    };
    let client = listeners
        .client
        .iter()
        .filter(|l| tls(&l.name))
        .map(|l| Ok((l.name.clone(), ssl::parse(p, &l.name)?)))
        .collect::<Result<_, ConfigError>>()?;
    Ok((client, controller))
}

/// What every SASL_PLAINTEXT or SASL_SSL client listener accepts.
/// Kafka's name of the authorizer Cairn implements.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// `authorizer.class.name`, `super.users` and `allow.everyone.if.no.acl.found`.
fn authorizer(
    p: &Props,
) -> Result<Option<std::sync::Arc<crate::security::acl::Settings>>, ConfigError> {
    let class = p.text("authorizer.class.name").trim();
    if class.is_empty() {
        return Ok(None);
    }
    if class != STANDARD_AUTHORIZER {
        return Err(ConfigError::Invalid {
            key: "authorizer.class.name".into(),
            value: class.into(),
            reason: format!("the one authorizer Cairn has is {STANDARD_AUTHORIZER}"),
        });
    }
    let users = p.text("super.users");
    let super_users =
        crate::security::acl::parse_super_users(users).map_err(|reason| ConfigError::Invalid {
            key: "super.users".into(),
            value: users.into(),
            reason,
        })?;
    Ok(Some(std::sync::Arc::new(crate::security::acl::Settings {
        super_users,
        allow_if_no_acl: p.bool("allow.everyone.if.no.acl.found")?,
    })))
}

fn sasl_listeners(
    p: &Props<'_>,
    listeners: &cluster::Listeners,
) -> Result<BTreeMap<String, std::sync::Arc<crate::security::sasl::Accepted>>, ConfigError> {
    listeners
        .client
        .iter()
        .filter(|l| {
            matches!(
                listeners.protocol_map.get(&l.name).map(String::as_str),
                Some("SASL_PLAINTEXT" | "SASL_SSL")
            )
        })
        .map(|l| Ok((l.name.clone(), sasl::parse(p, &l.name)?.into())))
        .collect()
}

/// What a SASL_PLAINTEXT or SASL_SSL controller listener of a cluster accepts, and how
/// this node logs in on it (a single node's quorum has no one to listen to).
fn controller_sasl(
    p: &Props<'_>,
    cluster: &ClusterConfig,
    listeners: &cluster::Listeners,
) -> Result<Option<ControllerSasl>, ConfigError> {
    if cluster.voters.len() < 2 {
        return Ok(None);
    }
    let Some(l) = listeners.controller.iter().find(|l| {
        matches!(
            listeners.protocol_map.get(&l.name).map(String::as_str),
            Some("SASL_PLAINTEXT" | "SASL_SSL")
        )
    }) else {
        return Ok(None);
    };
    let accepted = sasl::parse(p, &l.name)?;
    let login = sasl::controller_login(p, &l.name, &accepted)?;
    Ok(Some(ControllerSasl {
        accepted: accepted.into(),
        login,
    }))
}

/// The login on a SASL inter-broker listener of a cluster (a single node dials no one).
fn inter_broker_login(
    p: &Props<'_>,
    cluster: &ClusterConfig,
    listeners: &cluster::Listeners,
    sasl: &BTreeMap<String, std::sync::Arc<crate::security::sasl::Accepted>>,
) -> Result<Option<sasl::Login>, ConfigError> {
    if cluster.voters.len() < 2 {
        return Ok(None);
    }
    let name = inter_broker_name(cluster, &listeners.advertised);
    match sasl.get(name) {
        Some(accepted) => Ok(Some(sasl::inter_broker_login(p, name, accepted)?)),
        None => Ok(None),
    }
}

fn invalid(key: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(overrides: &[&str]) -> Result<Config, ConfigError> {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Config::load(None, Vec::new(), &o)
    }

    /// The KRaft lines of Kafka 4's config/server.properties (combined mode, one node).
    const KAFKA_STOCK: &[&str] = &[
        "process.roles=broker,controller",
        "node.id=1",
        "controller.quorum.bootstrap.servers=localhost:9093",
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
        "inter.broker.listener.name=PLAINTEXT",
        "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
    ];

    #[test]
    fn kafkas_stock_kraft_config_runs_a_single_node() {
        let c = load(KAFKA_STOCK).unwrap();
        let names = |ls: &[Listener]| ls.iter().map(|l| l.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&c.listeners), vec!["PLAINTEXT"]);
        assert_eq!(names(&c.advertised_listeners), vec!["PLAINTEXT"]);
        assert_eq!(names(&c.cluster.controller_listeners), vec!["CONTROLLER"]);
        assert_eq!(c.cluster.process_roles, vec!["broker", "controller"]);
        assert_eq!(c.cluster.offsets_topic_replication_factor, 1);
        assert!(c.cluster.voters.is_empty());
        // The same with one voter named explicitly.
        let mut one = KAFKA_STOCK.to_vec();
        one.push("controller.quorum.voters=1@localhost:9093");
        let c = load(&one).unwrap();
        assert_eq!(
            c.cluster.voters,
            vec![Voter {
                id: 1,
                host: "localhost".into(),
                port: 9093
            }]
        );
        assert!(!c.cluster.unclean_leader_election_enable);
        assert_eq!(c.cluster.replica_lag_time_max_ms, 30_000);
        assert_eq!(c.cluster.voters.len(), 1);
        let mut three = KAFKA_STOCK.to_vec();
        three.push("controller.quorum.voters=1@localhost:9093,2@b:9093,3@c:9093");
        let c = load(&three).unwrap();
        assert_eq!(c.cluster.voters.len(), 3);
    }

    #[test]
    fn tls_listeners_read_their_ssl_keys() {
        use ssl::{ClientAuth, StoreKind, StoreSource};
        let both = "listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093";
        let c = load(&[
            both,
            "ssl.keystore.location=/all.p12",
            "listener.name.ssl.ssl.keystore.location=/ssl-only.p12",
            "ssl.truststore.location=/trust.p12",
            "ssl.client.auth=REQUIRED",
        ])
        .unwrap();
        assert_eq!(c.ssl.keys().collect::<Vec<_>>(), vec!["SSL"]);
        let s = &c.ssl["SSL"];
        // The listener's own key wins; the type stays Kafka's default until the file is read.
        assert!(
            matches!(&s.keystore.source, StoreSource::File(p) if p == Path::new("/ssl-only.p12"))
        );
        assert_eq!(s.keystore.kind, StoreKind::Jks);
        assert_eq!(s.client_auth, ClientAuth::Required);
        assert_eq!(s.protocols.len(), 2);
        let e = |extra: &[&str]| {
            let mut v = vec![both, "ssl.keystore.location=/k.p12"];
            v.extend_from_slice(extra);
            load(&v).unwrap_err().to_string()
        };
        let pem_text = e(&[
            "ssl.keystore.location=",
            "ssl.keystore.certificate.chain=-----BEGIN CERTIFICATE-----",
            "ssl.keystore.key=secret-key-text",
        ]);
        assert!(pem_text.contains("ssl.keystore.type=PEM"), "{pem_text}");
        assert!(!pem_text.contains("secret-key-text"), "{pem_text}");
        assert!(e(&["ssl.keystore.type=JCEKS"]).contains("ssl.keystore.type"));
        assert!(e(&["ssl.enabled.protocols=TLSv1"]).contains("TLSv1.2"));
        // Another broker's certificate must name the host dialled, unless the algorithm is
        // set empty.
        let verify = |extra: &[&str]| {
            let mut v = vec![both, "ssl.keystore.location=/k.p12"];
            v.extend_from_slice(extra);
            load(&v).map(|c| c.ssl["SSL"].verify_hostname)
        };
        assert!(verify(&[]).unwrap());
        assert!(!verify(&["ssl.endpoint.identification.algorithm="]).unwrap());
        assert!(!verify(&["listener.name.ssl.ssl.endpoint.identification.algorithm="]).unwrap());
        let bad = verify(&["ssl.endpoint.identification.algorithm=ldap"]).unwrap_err();
        assert!(
            bad.to_string()
                .contains("ssl.endpoint.identification.algorithm"),
            "{bad}"
        );
        // Replication over TLS; the quorum does not speak TLS yet: refused with that said.
        let mut cluster = KAFKA_STOCK.to_vec();
        cluster.extend_from_slice(&[
            "controller.quorum.voters=1@localhost:9093,2@b:9093,3@c:9093",
            "listeners=SSL://:9092,CONTROLLER://:9093",
            "advertised.listeners=SSL://localhost:9092",
            "inter.broker.listener.name=SSL",
            "ssl.keystore.location=/k.p12",
        ]);
        let c = load(&cluster).unwrap();
        assert_eq!(c.inter_broker_listener(), "SSL");
        assert!(c.inter_broker_login.is_none());
        // The quorum over TLS: the controller listener's own settings.
        cluster.push("listener.security.protocol.map=SSL:SSL,CONTROLLER:SSL");
        cluster.push("listener.name.controller.ssl.client.auth=required");
        cluster.push("ssl.truststore.location=/t.p12");
        let c = load(&cluster).unwrap();
        let quorum = c.controller_ssl.unwrap();
        assert_eq!(quorum.client_auth, ClientAuth::Required);
        assert!(c.ssl["SSL"].client_auth == ClientAuth::None);
    }

    #[test]
    fn fetch_max_bytes_caps_answers_from_1024() {
        assert_eq!(load(&[]).unwrap().fetch_response_bytes_max, 55 << 20);
        let c = load(&["fetch.max.bytes=1024"]).unwrap();
        assert_eq!(c.fetch_response_bytes_max, 1024);
        let e = load(&["fetch.max.bytes=1023"]).unwrap_err().to_string();
        assert!(e.contains("fetch.max.bytes"), "{e}");
    }

    #[test]
    fn connection_limits_as_kafka_reads_them() {
        let c = load(&[]).unwrap();
        assert_eq!(c.connection_limits, limits::ConnectionLimits::default());
        let c = load(&[
            "listeners=PLAINTEXT://:9092,CLIENT://:9094",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "max.connections=100",
            "listener.name.client.max.connections=10",
            "max.connection.creation.rate=50",
            "listener.name.client.max.connection.creation.rate=5",
            "max.connections.per.ip=0",
            "max.connections.per.ip.overrides=10.0.0.1:5, [::1]:7,127.0.0.1:2147483647,[::ffff:10.0.0.9]:3",
        ])
        .unwrap();
        let l = &c.connection_limits;
        assert_eq!(l.broker, Some(100));
        assert_eq!(l.listener.get("CLIENT"), Some(&10));
        assert!(!l.listener.contains_key("PLAINTEXT"));
        assert_eq!(l.rate, Some(50));
        assert_eq!(l.listener_rate.get("CLIENT"), Some(&5));
        assert!(!l.listener_rate.contains_key("PLAINTEXT"));
        assert_eq!(l.per_ip("10.0.0.1".parse().unwrap()), Some(5));
        assert_eq!(l.per_ip("::1".parse().unwrap()), Some(7));
        assert_eq!(l.per_ip("10.0.0.2".parse().unwrap()), Some(0));
        // An IPv4-mapped address names the IPv4 peer, as the server counts it.
        assert_eq!(l.per_ip("10.0.0.9".parse().unwrap()), Some(3));
        // As Kafka: 0 per address only when some address is allowed more.
        let e = load(&["max.connections.per.ip=0"]).unwrap_err().to_string();
        assert!(e.contains("max.connections.per.ip.overrides"), "{e}");
        for bad in [
            "10.0.0.1",
            "10.0.0.1:many",
            "10.0.0.1:-1",
            "no-such-host.invalid:3",
        ] {
            let e = load(&[&format!("max.connections.per.ip.overrides={bad}")])
                .unwrap_err()
                .to_string();
            assert!(e.contains("max.connections.per.ip.overrides"), "{bad}: {e}");
        }
        let e = load(&["listener.name.plaintext.max.connections=-1"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("listener.name.plaintext.max.connections"), "{e}");
    }

    #[test]
    fn a_sasl_controller_listener_needs_plain_or_oauthbearer_and_a_login() {
        let base = [
            "node.id=1",
            "process.roles=broker,controller",
            "controller.quorum.voters=1@localhost:9093,2@b:9093,3@c:9093",
            "controller.listener.names=CONTROLLER",
            "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
            "advertised.listeners=PLAINTEXT://localhost:9092",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
            "ssl.keystore.location=/k.p12",
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN,OAUTHBEARER",
            "listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.\
             plain.PlainLoginModule required username=\"c\" password=\"c-secret\" \
             user_c=\"c-secret\";",
            "listener.name.controller.oauthbearer.sasl.jaas.config=org.apache.kafka.common.\
             security.oauthbearer.OAuthBearerLoginModule required \
             unsecuredLoginStringClaim_sub=\"c\";",
        ];
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            load(&v)
        };
        // Kafka's default mechanism, GSSAPI: refused naming the key.
        let e = with(&[]).unwrap_err().to_string();
        assert!(e.contains("sasl.mechanism.controller.protocol"), "{e}");
        let c = with(&["sasl.mechanism.controller.protocol=PLAIN"]).unwrap();
        let sasl = c.controller_sasl.unwrap();
        assert_eq!(sasl.login.username, "c");
        assert_eq!(sasl.accepted.plain_users["c"], "c-secret");
        assert!(c.controller_ssl.is_some(), "SASL_SSL speaks TLS");
        assert!(c.inter_broker_login.is_none());
        let c = with(&["sasl.mechanism.controller.protocol=OAUTHBEARER"]).unwrap();
        assert!(matches!(
            c.controller_sasl.unwrap().login.secret,
            sasl::Secret::UnsecuredToken(_)
        ));
        // SCRAM's credentials live in the metadata the quorum carries: refused, saying so.
        let e = with(&[
            "sasl.mechanism.controller.protocol=PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("listener.name.controller.sasl.enabled.mechanisms") && e.contains("SCRAM"),
            "{e}"
        );
        // A PLAIN login module without the node's own username: refused naming the key.
        let e = with(&[
            "sasl.mechanism.controller.protocol=PLAIN",
            "listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.\
             plain.PlainLoginModule required user_c=\"c-secret\";",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("listener.name.controller.plain.sasl.jaas.config")
                && e.contains("controller listener"),
            "{e}"
        );
        // A single node's quorum dials no one: no login is needed.
        let single: Vec<&str> = base
            .iter()
            .map(|k| match k.starts_with("controller.quorum.voters") {
                true => "controller.quorum.voters=1@localhost:9093",
                false => k,
            })
            .collect();
        assert!(load(&single).unwrap().controller_sasl.is_none());
    }

    #[test]
    fn a_sasl_inter_broker_listener_needs_a_login_for_its_mechanism() {
        let base = [
            "node.id=1",
            "process.roles=broker,controller",
            "controller.quorum.voters=1@localhost:9093,2@b:9093,3@c:9093",
            "controller.listener.names=CONTROLLER",
            "listeners=SASL_PLAINTEXT://:9092,CONTROLLER://:9093",
            "advertised.listeners=SASL_PLAINTEXT://localhost:9092",
            "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
        ];
        let plain = "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.\
            security.plain.PlainLoginModule required username=\"broker\" password=\"b-secret\" \
            user_broker=\"b-secret\";";
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.push(plain);
            v.extend_from_slice(extra);
            load(&v)
        };
        // Kafka's default mechanism, GSSAPI, is not enabled: refused naming the key.
        let e = with(&[]).unwrap_err().to_string();
        assert!(e.contains("sasl.mechanism.inter.broker.protocol"), "{e}");
        assert!(e.contains("PLAIN,SCRAM-SHA-512"), "{e}");
        let c = with(&["sasl.mechanism.inter.broker.protocol=PLAIN"]).unwrap();
        let login = c.inter_broker_login.unwrap();
        assert_eq!(
            (login.mechanism.as_str(), login.username.as_str()),
            ("PLAIN", "broker")
        );
        assert!(matches!(&login.secret, sasl::Secret::Password(p) if p == "b-secret"));
        // SCRAM's login module is needed, with a username and a password.
        let scram = ["sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512"];
        let e = with(&scram).unwrap_err().to_string();
        assert!(
            e.contains("listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"),
            "{e}"
        );
        let no_password = "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.\
            kafka.common.security.scram.ScramLoginModule required username=\"broker\";";
        let e = with(&[scram[0], no_password]).unwrap_err().to_string();
        assert!(e.contains("needs username and password"), "{e}");
        assert!(!e.contains("b-secret"), "{e}");
        // OAUTHBEARER: the login module's unsecured token claims, with a principal.
        let oauth = |options: &str| {
            let mut v = base.to_vec();
            v.pop();
            let jaas = format!(
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.\
                 common.security.oauthbearer.OAuthBearerLoginModule required {options};"
            );
            let mut v: Vec<String> = v.into_iter().map(String::from).collect();
            v.push("sasl.enabled.mechanisms=OAUTHBEARER".into());
            v.push("sasl.mechanism.inter.broker.protocol=OAUTHBEARER".into());
            v.push(jaas);
            load(&v.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let login = oauth("unsecuredLoginStringClaim_sub=\"broker\"")
            .unwrap()
            .inter_broker_login
            .unwrap();
        assert_eq!(login.username, "broker");
        assert!(matches!(login.secret, sasl::Secret::UnsecuredToken(_)));
        let e = oauth("unsecuredLoginLifetimeSeconds=\"60\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unsecuredLoginStringClaim_sub"), "{e}");
        assert!(e.contains("oauthbearer.sasl.jaas.config"), "{e}");
        // A single node dials no one: nothing is needed.
        let mut single = vec!["node.id=1", "listeners=SASL_PLAINTEXT://:9092"];
        single.extend_from_slice(&["sasl.enabled.mechanisms=PLAIN", plain]);
        assert!(load(&single).unwrap().inter_broker_login.is_none());
    }

    #[test]
    fn a_bad_value_under_a_listener_prefix_is_named_with_its_prefix() {
        let key = "listener.name.sasl_plaintext.plain.connections.max.reauth.ms";
        let e = load(&[
            "listeners=SASL_PLAINTEXT://:9092",
            "sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.\
             security.plain.PlainLoginModule required user_a=\"b\";",
            &format!("{key}=soon"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains(&format!("for {key}:")), "{e}");
    }

    #[test]
    fn bad_cluster_keys_name_the_key() {
        let with = |extra: &[&str]| {
            let mut v = KAFKA_STOCK.to_vec();
            v.extend_from_slice(extra);
            load(&v).unwrap_err().to_string()
        };
        for (extra, key, words) in [
            (
                vec!["process.roles=broker"],
                "process.roles",
                "combined mode",
            ),
            (
                vec!["process.roles=broker,leader"],
                "process.roles",
                "unknown role",
            ),
            (
                vec!["controller.quorum.voters=1@localhost:9999,2@b:9093"],
                "controller.quorum.voters",
                "port 9999",
            ),
            (
                vec!["controller.quorum.voters=1a:9093"],
                "controller.quorum.voters",
                "1@host:9093",
            ),
            (
                vec!["controller.quorum.voters=x@a:9093"],
                "controller.quorum.voters",
                "not a number",
            ),
            (
                vec!["controller.quorum.voters=1@a:70000"],
                "controller.quorum.voters",
                "port",
            ),
            (
                vec!["controller.quorum.voters=1@a:9093,1@b:9093"],
                "controller.quorum.voters",
                "twice",
            ),
            (
                vec!["controller.quorum.voters=2@a:9093"],
                "controller.quorum.voters",
                "node.id 1",
            ),
            (
                vec!["controller.listener.names="],
                "controller.listener.names",
                "required",
            ),
            (
                vec!["controller.listener.names=RAFT"],
                "controller.listener.names",
                "RAFT",
            ),
            (
                vec!["inter.broker.listener.name=CONTROLLER"],
                "inter.broker.listener.name",
                "listeners",
            ),
            (
                vec!["listeners=CONTROLLER://:9093"],
                "listeners",
                "clients need one",
            ),
            (
                vec!["unclean.leader.election.enable=yes"],
                "unclean.leader.election.enable",
                "true or false",
            ),
            (
                vec!["replica.lag.time.max.ms=0"],
                "replica.lag.time.max.ms",
                "between",
            ),
            (
                vec!["broker.heartbeat.interval.ms=9000"],
                "broker.heartbeat.interval.ms",
                "below",
            ),
            (
                vec!["offsets.topic.replication.factor=0"],
                "offsets.topic.replication.factor",
                "between",
            ),
        ] {
            let e = with(&extra);
            assert!(e.contains(key) && e.contains(words), "{extra:?}: {e}");
        }
    }

    #[test]
    fn controller_listeners_default_to_plaintext_like_kafka() {
        let kraft = |quorum: &'static str| {
            vec![
                "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "process.roles=broker,controller",
                "controller.listener.names=CONTROLLER",
                quorum,
            ]
        };
        for quorum in [
            "controller.quorum.voters=1@127.0.0.1:9093",
            "controller.quorum.bootstrap.servers=127.0.0.1:9093",
        ] {
            let c = load(&kraft(quorum)).unwrap();
            assert_eq!(c.cluster.controller_listeners[0].name, "CONTROLLER");
            assert_eq!(c.listeners[0].name, "PLAINTEXT");
            assert_eq!(c.listener_security_protocol_map["CONTROLLER"], "PLAINTEXT");
            assert_eq!(c.listener_security_protocol_map["SASL_SSL"], "SASL_SSL");
        }
        // A listener name that maps to nothing is still refused...
        let e = load(&["listeners=PLAINTEXT://127.0.0.1:9092,OTHER://127.0.0.1:9094"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("listener name OTHER is not in listener.security.protocol.map"),
            "{e}"
        );
        // ...and a map that is set is taken as it is, as Kafka does.
        let mut explicit = kraft("controller.quorum.voters=1@127.0.0.1:9093");
        explicit.push("listener.security.protocol.map=PLAINTEXT:PLAINTEXT");
        let e = load(&explicit).unwrap_err().to_string();
        assert!(e.contains("CONTROLLER is not in"), "{e}");
        // With a secure listener PLAINTEXT is no safe guess, so Kafka adds no mapping.
        let mut secure = kraft("controller.quorum.voters=1@127.0.0.1:9093");
        secure[0] = "listeners=CONTROLLER://127.0.0.1:9093,SSL://127.0.0.1:9094";
        let e = load(&secure).unwrap_err().to_string();
        assert!(e.contains("CONTROLLER is not in"), "{e}");
    }

    #[test]
    fn defaults_are_a_single_local_node() {
        let c = load(&[]).unwrap();
        assert_eq!(c.node_id, 1);
        assert_eq!(c.listeners[0].bind_addr(), "127.0.0.1:9092");
        assert_eq!(c.advertised_listeners[0].host, "127.0.0.1");
        assert_eq!(c.log_dirs, vec![PathBuf::from("./data")]);
        assert_eq!(c.num_partitions, 1);
        assert_eq!(c.message_bytes_max, 1_048_588);
        assert_eq!(c.log_retention_ms, 168 * 3_600_000);
        assert!(c.auto_create_topics_enable);
    }

    #[test]
    fn env_names_map_like_the_kafka_image() {
        assert_eq!(env_key("KAFKA_LOG_DIRS").as_deref(), Some("log.dirs"));
        assert_eq!(env_key("KAFKA_NODE_ID").as_deref(), Some("node.id"));
        assert_eq!(env_key("KAFKA_A__B").as_deref(), Some("a_b"));
        assert_eq!(env_key("KAFKA_A___B_C").as_deref(), Some("a-b.c"));
        assert_eq!(env_key("KAFKA_HEAP_OPTS"), None);
        assert_eq!(env_key("PATH"), None);
    }

    #[test]
    fn later_sources_win() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server.properties");
        std::fs::write(
            &file,
            "num.partitions=3\nbroker.id = 7\n# comment\nlog.dirs=/x\n",
        )
        .unwrap();
        let env = vec![("KAFKA_NUM_PARTITIONS".to_string(), "5".to_string())];
        let c = Config::load(Some(&file), env, &["log.dirs=/y".to_string()]).unwrap();
        assert_eq!(c.num_partitions, 5);
        assert_eq!(c.node_id, 7);
        assert_eq!(c.log_dirs, vec![PathBuf::from("/y")]);
    }

    #[test]
    fn properties_syntax() {
        let p = parse_properties("a=1\nb : two words \nc 3\nd=x\\\n  y\n! bang\ne=\\tq\n");
        assert_eq!(p["a"], "1");
        assert_eq!(p["b"], "two words");
        assert_eq!(p["c"], "3");
        assert_eq!(p["d"], "xy");
        assert_eq!(p["e"], "\tq");
        assert!(!p.contains_key("!"));
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = load(&["num.partitions=abc"]).unwrap_err().to_string();
        assert!(e.contains("num.partitions") && e.contains("abc"), "{e}");
        let e = load(&["num.partitions=0"]).unwrap_err().to_string();
        assert!(e.contains("between"), "{e}");
        // Checked even where Cairn has nothing for it to bound.
        let e = load(&["socket.listen.backlog.size=0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("socket.listen.backlog.size"), "{e}");
        let e = load(&["queued.max.requests=0"]).unwrap_err().to_string();
        assert!(e.contains("queued.max.requests"), "{e}");
        assert!(load(&["queued.max.requests=1"]).is_ok());
        let e = load(&["auto.create.topics.enable=yes"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("true or false"), "{e}");
        let e = load(&["listeners=PLAINTEXT://127.0.0.1:99999"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("listeners"), "{e}");
        let e = load(&["listeners=SSL://127.0.0.1:9093"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("ssl.keystore.location"), "{e}");
        let e = load(&["listeners=SASL_PLAINTEXT://127.0.0.1:9093"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("GSSAPI is not supported"), "{e}");
        let e = load(&[
            "listeners=PLAINTEXT://0.0.0.0:9092",
            "advertised.listeners=PLAINTEXT://0.0.0.0:9092",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("advertised.listeners"), "{e}");
        assert!(matches!(
            load(&["novalue"]),
            Err(ConfigError::BadOverride(_))
        ));
    }

    #[test]
    fn retention_units() {
        assert_eq!(
            load(&["log.retention.minutes=2"]).unwrap().log_retention_ms,
            120_000
        );
        assert_eq!(
            load(&["log.retention.minutes=2", "log.retention.ms=5"])
                .unwrap()
                .log_retention_ms,
            5
        );
        assert_eq!(
            load(&["log.retention.hours=-1"]).unwrap().log_retention_ms,
            -1
        );
    }
}
