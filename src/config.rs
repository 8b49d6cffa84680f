//! Broker configuration: a `server.properties` file, `KAFKA_*` environment variables and
//! `--override key=value` flags, merged in that order (later wins) into one typed [`Config`].
//!
//! Keys and defaults are Kafka's, so an existing `server.properties` works unchanged. Keys
//! Cairn does not know are logged and ignored; a known key with a bad value stops start-up
//! with a message naming the key (see [`ConfigError`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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
        self.cluster
            .inter_broker_listener_name
            .as_deref()
            .unwrap_or(&self.advertised_listeners[0].name)
    }
}

impl ClusterConfig {
    /// More than this node in the quorum: a replicated cluster.
    pub fn is_multi_node(&self) -> bool {
        self.voters.len() > 1
    }
}

/// The broker's typed configuration. Units are in the names.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_id: i32,
    pub listeners: Vec<Listener>,
    pub advertised_listeners: Vec<Listener>,
    /// `log.dirs`: the first also holds topics, groups and other metadata; partitions are
    /// spread over all of them.
    pub log_dirs: Vec<PathBuf>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub message_bytes_max: i32,
    pub socket_request_bytes_max: i32,
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    pub log_retention_check_interval_ms: u64,
    pub min_insync_replicas: i32,
    pub delete_topic_enable: bool,
    /// Consumer groups (Kafka's `group.*` and `offsets.*` keys).
    pub group_initial_rebalance_delay_ms: u64,
    pub group_min_session_timeout_ms: u64,
    pub group_max_session_timeout_ms: u64,
    pub group_consumer_session_timeout_ms: u64,
    pub group_consumer_heartbeat_interval_ms: u64,
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
    /// Every key that was set explicitly (file, environment or override), with its value:
    /// DescribeConfigs reports these as STATIC_BROKER_CONFIG.
    pub explicit: BTreeMap<String, String>,
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

/// Every key Cairn honours, so the rest can be reported as ignored.
pub const KNOWN_KEYS: &[&str] = &[
    "node.id",
    "broker.id",
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "log.dirs",
    "log.dir",
    "num.partitions",
    "default.replication.factor",
    "auto.create.topics.enable",
    "message.max.bytes",
    "socket.request.max.bytes",
    "log.retention.ms",
    "log.retention.minutes",
    "log.retention.hours",
    "log.retention.bytes",
    "log.retention.check.interval.ms",
    "min.insync.replicas",
    "delete.topic.enable",
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.consumer.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "offset.metadata.max.bytes",
    "metrics.listener",
    "metrics.partition.series.enable",
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "inter.broker.listener.name",
    "offsets.topic.replication.factor",
    "offsets.topic.num.partitions",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "unclean.leader.election.enable",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
    "leader.imbalance.per.broker.percentage",
    "replica.lag.time.max.ms",
    "broker.session.timeout.ms",
    "broker.heartbeat.interval.ms",
];

impl Config {
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

    /// Builds a config from merged key/value pairs, validating each known key.
    pub fn from_props(props: BTreeMap<String, String>) -> Result<Config, ConfigError> {
        for key in props.keys() {
            if !KNOWN_KEYS.contains(&key.as_str()) {
                tracing::warn!(key = %key, "unknown or unsupported config key ignored");
            }
        }
        let p = Props(&props);
        let node_id = match p.get("node.id").or(p.get("broker.id")) {
            Some(_) if p.get("node.id").is_some() => p.int("node.id", 0, i32::MAX as i64)? as i32,
            Some(_) => p.int("broker.id", 0, i32::MAX as i64)? as i32,
            None => 1,
        };
        let protocol_map = parse_protocol_map(p.get("listener.security.protocol.map").unwrap_or(
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ))?;
        let listeners = parse_listeners(
            "listeners",
            p.get("listeners").unwrap_or("PLAINTEXT://127.0.0.1:9092"),
            &protocol_map,
        )?;
        if listeners.is_empty() {
            return Err(invalid(
                "listeners",
                "",
                "at least one listener is required",
            ));
        }
        let (listeners, cluster) = parse_cluster(&p, node_id, listeners)?;
        let advertised_listeners = match p.get("advertised.listeners") {
            Some(v) => parse_listeners("advertised.listeners", v, &protocol_map)?,
            None => listeners
                .iter()
                .map(|l| Listener {
                    host: advertised_host(&l.host),
                    ..l.clone()
                })
                .collect(),
        };
        // Controllers' addresses are for the quorum, never for clients' metadata.
        let advertised_listeners: Vec<Listener> = advertised_listeners
            .into_iter()
            .filter(|l| !cluster.controller_listener_names.contains(&l.name))
            .collect();
        for a in &advertised_listeners {
            if a.host == "0.0.0.0" || a.host == "::" {
                return Err(invalid(
                    "advertised.listeners",
                    &format!("{}://{}:{}", a.name, a.host, a.port),
                    "cannot advertise the non-routable meta-address; name a host clients can reach",
                ));
            }
        }
        let log_dirs = match p.get("log.dirs").or(p.get("log.dir")) {
            Some(v) => {
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
                dirs
            }
            None => vec![PathBuf::from("./data")],
        };
        let log_retention_ms = if p.get("log.retention.ms").is_some() {
            p.int("log.retention.ms", -1, i64::MAX)?
        } else if p.get("log.retention.minutes").is_some() {
            p.int("log.retention.minutes", -1, i64::MAX / 60_000)?
                .saturating_mul(60_000)
                .max(-1)
        } else {
            p.int_or("log.retention.hours", 168, -1, i64::MAX / 3_600_000)?
                .saturating_mul(3_600_000)
                .max(-1)
        };
        let metrics_listener = match p.get("metrics.listener") {
            None => Some("0.0.0.0:9644".parse().expect("valid default")),
            Some("") | Some("none") => None,
            Some(v) => Some(v.parse().map_err(|_| {
                invalid(
                    "metrics.listener",
                    v,
                    "expected host:port, e.g. 0.0.0.0:9644",
                )
            })?),
        };
        let group_min_session =
            p.int_or("group.min.session.timeout.ms", 6000, 0, i32::MAX as i64)? as u64;
        let group_max_session = p.int_or(
            "group.max.session.timeout.ms",
            1_800_000,
            0,
            i32::MAX as i64,
        )? as u64;
        if group_max_session < group_min_session {
            return Err(invalid(
                "group.max.session.timeout.ms",
                &group_max_session.to_string(),
                "must not be below group.min.session.timeout.ms",
            ));
        }
        Ok(Config {
            node_id,
            listeners,
            advertised_listeners,
            log_dirs,
            num_partitions: p.int_or("num.partitions", 1, 1, 1_000_000)? as i32,
            default_replication_factor: p.int_or(
                "default.replication.factor",
                1,
                1,
                i16::MAX as i64,
            )? as i16,
            auto_create_topics_enable: p.bool_or("auto.create.topics.enable", true)?,
            message_bytes_max: p.int_or("message.max.bytes", 1_048_588, 0, i32::MAX as i64)? as i32,
            socket_request_bytes_max: p.int_or(
                "socket.request.max.bytes",
                104_857_600,
                1,
                i32::MAX as i64,
            )? as i32,
            log_retention_ms,
            log_retention_bytes: p.int_or("log.retention.bytes", -1, -1, i64::MAX)?,
            log_retention_check_interval_ms: p.int_or(
                "log.retention.check.interval.ms",
                300_000,
                1,
                i64::MAX,
            )? as u64,
            min_insync_replicas: p.int_or("min.insync.replicas", 1, 1, i32::MAX as i64)? as i32,
            delete_topic_enable: p.bool_or("delete.topic.enable", true)?,
            group_initial_rebalance_delay_ms: p.int_or(
                "group.initial.rebalance.delay.ms",
                3000,
                0,
                i32::MAX as i64,
            )? as u64,
            group_min_session_timeout_ms: group_min_session,
            group_max_session_timeout_ms: group_max_session,
            group_consumer_session_timeout_ms: p.int_or(
                "group.consumer.session.timeout.ms",
                45_000,
                1,
                i32::MAX as i64,
            )? as u64,
            group_consumer_heartbeat_interval_ms: p.int_or(
                "group.consumer.heartbeat.interval.ms",
                5_000,
                1,
                i32::MAX as i64,
            )? as u64,
            offsets_retention_ms: p.int_or(
                "offsets.retention.minutes",
                10_080,
                1,
                i32::MAX as i64,
            )? as u64
                * 60_000,
            offsets_retention_check_interval_ms: p.int_or(
                "offsets.retention.check.interval.ms",
                600_000,
                1,
                i64::MAX,
            )? as u64,
            offset_metadata_bytes_max: p.int_or(
                "offset.metadata.max.bytes",
                4096,
                0,
                i32::MAX as i64,
            )? as usize,
            metrics_listener,
            metrics_partition_series: p.bool_or("metrics.partition.series.enable", true)?,
            cluster,
            explicit: props.clone(),
        })
    }
}

/// Reads the KRaft keys and takes the controller listeners out of `listeners`. Combined mode
/// is the one supported shape; a quorum of more than this node needs replication, which
/// is not built yet, so it stops start-up instead of running unreplicated.
fn parse_cluster(
    p: &Props<'_>,
    node_id: i32,
    listeners: Vec<Listener>,
) -> Result<(Vec<Listener>, ClusterConfig), ConfigError> {
    let list = |key: &str| -> Vec<String> {
        p.get(key)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let roles: Vec<String> = list("process.roles")
        .into_iter()
        .map(|r| r.to_ascii_lowercase())
        .collect();
    if let Some(bad) = roles.iter().find(|r| *r != "broker" && *r != "controller") {
        return Err(invalid(
            "process.roles",
            p.get("process.roles").unwrap_or_default(),
            &format!("unknown role '{bad}'; roles are broker and controller"),
        ));
    }
    if p.get("process.roles").is_some()
        && !(roles.contains(&"broker".to_string()) && roles.contains(&"controller".to_string()))
    {
        return Err(invalid(
            "process.roles",
            p.get("process.roles").unwrap_or_default(),
            "only combined mode (broker,controller) is supported",
        ));
    }
    let mut voters: Vec<Voter> = Vec::new();
    let raw_voters = p.get("controller.quorum.voters").unwrap_or_default();
    for entry in list("controller.quorum.voters") {
        let bad = |why: &str| invalid("controller.quorum.voters", raw_voters, why);
        let (id, addr) = entry
            .split_once('@')
            .ok_or_else(|| bad("entries must look like 1@host:9093"))?;
        let id: i32 = id
            .trim()
            .parse()
            .map_err(|_| bad(&format!("voter id '{id}' is not a number")))?;
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| bad(&format!("voter {id} has no :port")))?;
        let port: u16 = port.parse().map_err(|_| {
            bad(&format!(
                "voter {id}: port '{port}' is not a number from 0 to 65535"
            ))
        })?;
        if voters.iter().any(|v| v.id == id) {
            return Err(bad(&format!("voter {id} is listed twice")));
        }
        voters.push(Voter {
            id,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
        });
    }
    if !voters.is_empty() && !voters.iter().any(|v| v.id == node_id) {
        return Err(invalid(
            "controller.quorum.voters",
            raw_voters,
            &format!("node.id {node_id} is not one of the voters (combined mode)"),
        ));
    }
    let controller_names: Vec<String> = list("controller.listener.names")
        .into_iter()
        .map(|n| n.to_ascii_uppercase())
        .collect();
    if !roles.is_empty() && controller_names.is_empty() {
        return Err(invalid(
            "controller.listener.names",
            "",
            "required when process.roles includes controller",
        ));
    }
    for n in &controller_names {
        if !roles.is_empty() && !listeners.iter().any(|l| &l.name == n) {
            return Err(invalid(
                "controller.listener.names",
                p.get("controller.listener.names").unwrap_or_default(),
                &format!("{n} is not one of the listeners"),
            ));
        }
    }
    let (controller_listeners, client_listeners): (Vec<Listener>, Vec<Listener>) = listeners
        .into_iter()
        .partition(|l| controller_names.contains(&l.name));
    if voters.len() > 1 {
        let me = voters
            .iter()
            .find(|v| v.id == node_id)
            .expect("checked above");
        if !controller_listeners.iter().any(|l| l.port == me.port) {
            return Err(invalid(
                "controller.quorum.voters",
                raw_voters,
                &format!(
                    "voter {node_id} (this node) is at port {}, but no controller listener listens there",
                    me.port
                ),
            ));
        }
    }
    if client_listeners.is_empty() {
        return Err(invalid(
            "listeners",
            p.get("listeners").unwrap_or_default(),
            "every listener is a controller listener; clients need one too",
        ));
    }
    if let Some(name) = p.get("inter.broker.listener.name") {
        let name = name.to_ascii_uppercase();
        if !client_listeners.iter().any(|l| l.name == name) {
            return Err(invalid(
                "inter.broker.listener.name",
                &name,
                "must name one of the (non-controller) listeners",
            ));
        }
    }
    let session = p.int_or("broker.session.timeout.ms", 9000, 1, i32::MAX as i64)? as u64;
    let heartbeat = p.int_or("broker.heartbeat.interval.ms", 2000, 1, i32::MAX as i64)? as u64;
    if heartbeat >= session {
        return Err(invalid(
            "broker.heartbeat.interval.ms",
            &heartbeat.to_string(),
            "must be below broker.session.timeout.ms",
        ));
    }
    let cluster = ClusterConfig {
        process_roles: roles,
        controller_listener_names: controller_names,
        controller_listeners,
        offsets_topic_replication_factor: p.int_or(
            "offsets.topic.replication.factor",
            3,
            1,
            i16::MAX as i64,
        )? as i16,
        offsets_topic_num_partitions: p.int_or("offsets.topic.num.partitions", 50, 1, 10_000)?
            as i32,
        unclean_leader_election_enable: p.bool_or("unclean.leader.election.enable", false)?,
        auto_leader_rebalance: {
            let interval = p.int_or(
                "leader.imbalance.check.interval.seconds",
                300,
                1,
                86_400 * 365,
            )? as u64;
            let percent = p.int_or("leader.imbalance.per.broker.percentage", 10, 0, 100)? as u32;
            p.bool_or("auto.leader.rebalance.enable", true)?
                .then_some((std::time::Duration::from_secs(interval), percent))
        },
        replica_lag_time_max_ms: p.int_or("replica.lag.time.max.ms", 30_000, 1, i64::MAX)? as u64,
        broker_session_timeout_ms: session,
        broker_heartbeat_interval_ms: heartbeat,
        inter_broker_listener_name: p
            .get("inter.broker.listener.name")
            .map(|n| n.to_ascii_uppercase()),
        voters,
    };
    Ok((client_listeners, cluster))
}

/// Kafka advertises the canonical host name for a listener bound to all interfaces; we
/// advertise loopback, which is what a single-node default should answer.
fn advertised_host(bind_host: &str) -> String {
    match bind_host {
        "" | "0.0.0.0" | "::" => "127.0.0.1".to_string(),
        h => h.to_string(),
    }
}

fn parse_protocol_map(v: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut map = BTreeMap::new();
    for entry in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, proto) = entry.split_once(':').ok_or_else(|| {
            invalid(
                "listener.security.protocol.map",
                v,
                "entries must be NAME:PROTOCOL",
            )
        })?;
        map.insert(
            name.trim().to_ascii_uppercase(),
            proto.trim().to_ascii_uppercase(),
        );
    }
    Ok(map)
}

fn parse_listeners(
    key: &str,
    v: &str,
    protocol_map: &BTreeMap<String, String>,
) -> Result<Vec<Listener>, ConfigError> {
    let mut out: Vec<Listener> = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, addr) = entry
            .split_once("://")
            .ok_or_else(|| invalid(key, v, "entries must look like PLAINTEXT://host:port"))?;
        let name = name.to_ascii_uppercase();
        let protocol = protocol_map.get(&name).ok_or_else(|| {
            invalid(
                key,
                v,
                &format!("listener name {name} is not in listener.security.protocol.map"),
            )
        })?;
        if protocol != "PLAINTEXT" {
            return Err(invalid(
                key,
                v,
                &format!("security protocol {protocol} of listener {name} is not supported yet (PLAINTEXT only)"),
            ));
        }
        let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
            let (h, p) = rest
                .split_once("]:")
                .ok_or_else(|| invalid(key, v, "IPv6 hosts must look like [::1]:9092"))?;
            (h.to_string(), p)
        } else {
            let (h, p) = addr
                .rsplit_once(':')
                .ok_or_else(|| invalid(key, v, "missing :port"))?;
            (h.to_string(), p)
        };
        let port: u16 = port.parse().map_err(|_| {
            invalid(
                key,
                v,
                &format!("port '{port}' is not a number from 0 to 65535"),
            )
        })?;
        if out.iter().any(|l| l.name == name) {
            return Err(invalid(
                key,
                v,
                &format!("listener name {name} appears twice"),
            ));
        }
        out.push(Listener { name, host, port });
    }
    Ok(out)
}

fn invalid(key: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

struct Props<'a>(&'a BTreeMap<String, String>);

impl Props<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|s| s.trim())
    }

    fn int(&self, key: &str, min: i64, max: i64) -> Result<i64, ConfigError> {
        let v = self.get(key).unwrap_or_default();
        let n: i64 = v
            .parse()
            .map_err(|_| invalid(key, v, "expected a whole number"))?;
        if n < min || n > max {
            return Err(invalid(key, v, &format!("must be between {min} and {max}")));
        }
        Ok(n)
    }

    fn int_or(&self, key: &str, default: i64, min: i64, max: i64) -> Result<i64, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(_) => self.int(key, min, max),
        }
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(invalid(key, v, "expected true or false")),
        }
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
        assert!(!c.cluster.is_multi_node());
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
        assert!(!c.cluster.is_multi_node());
        let mut three = KAFKA_STOCK.to_vec();
        three.push("controller.quorum.voters=1@localhost:9093,2@b:9093,3@c:9093");
        let c = load(&three).unwrap();
        assert!(c.cluster.is_multi_node());
        assert_eq!(c.cluster.voters.len(), 3);
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
        assert!(e.contains("not supported"), "{e}");
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
