//! The listener and KRaft keys: `listeners`, `advertised.listeners`,
//! `listener.security.protocol.map`, `process.roles`, `controller.*` and the keys a
//! replicated cluster reads. They are checked against each other here, because a listener
//! name means nothing without the protocol map and the controller listener names.

use std::collections::BTreeMap;

use super::keys::{Props, PROTOCOL_MAP_DEFAULT};
use super::{invalid, ClusterConfig, ConfigError, Listener, Voter};

/// The listeners, split the way the broker serves them.
pub(super) struct Listeners {
    /// The listeners clients connect to.
    pub client: Vec<Listener>,
    /// The listeners named in `controller.listener.names`: for the quorum only.
    pub controller: Vec<Listener>,
    /// What Metadata tells clients: never a controller listener.
    pub advertised: Vec<Listener>,
    /// `listener.security.protocol.map` as given, or Kafka's derived default.
    pub protocol_map: BTreeMap<String, String>,
}

/// Reads `listeners` and `advertised.listeners` and takes the controller listeners out.
pub(super) fn parse_listeners(p: &Props<'_>) -> Result<Listeners, ConfigError> {
    let roles = roles(p)?;
    let controller_names = controller_names(p);
    let protocol_map = protocol_map(p, !roles.is_empty(), &controller_names)?;
    let listeners = parse_listener_list("listeners", p.text("listeners"), &protocol_map)?;
    if listeners.is_empty() {
        return Err(invalid(
            "listeners",
            "",
            "at least one listener is required",
        ));
    }
    if !roles.is_empty() {
        check_controller_names(p, &controller_names, &listeners)?;
    }
    let (controller, client): (Vec<Listener>, Vec<Listener>) = listeners
        .into_iter()
        .partition(|l| controller_names.contains(&l.name));
    if client.is_empty() {
        return Err(invalid(
            "listeners",
            p.text("listeners"),
            "every listener is a controller listener; clients need one too",
        ));
    }
    let advertised = advertised(p, &client, &controller_names, &protocol_map)?;
    Ok(Listeners {
        client,
        controller,
        advertised,
        protocol_map,
    })
}

/// Reads the KRaft keys. Combined mode is the one supported shape; several voters form a
/// replicated cluster.
pub(super) fn parse(
    p: &Props<'_>,
    node_id: i32,
    listeners: &Listeners,
) -> Result<ClusterConfig, ConfigError> {
    let voters = voters(p, node_id)?;
    let offsets_topic_replication_factor =
        replication_factor(p, "offsets.topic.replication.factor", &voters)?;
    let txn_topic_replication_factor =
        replication_factor(p, "transaction.state.log.replication.factor", &voters)?;
    let txn_min_isr = p.int("transaction.state.log.min.isr")? as i32;
    let txn_topic_min_isr = match p.get("transaction.state.log.min.isr") {
        Some(_) => txn_min_isr,
        None => txn_min_isr.min(txn_topic_replication_factor as i32),
    };
    let share_topic_replication_factor = replication_factor(
        p,
        "share.coordinator.state.topic.replication.factor",
        &voters,
    )?;
    let share_min_isr = p.int("share.coordinator.state.topic.min.isr")? as i32;
    let share_topic_min_isr = match p.get("share.coordinator.state.topic.min.isr") {
        Some(_) => share_min_isr,
        None => share_min_isr.min(share_topic_replication_factor as i32),
    };
    check_own_voter_port(p, node_id, &voters, &listeners.controller)?;
    let inter_broker_listener_name = inter_broker_listener_name(p, &listeners.client)?;
    let (broker_session_timeout_ms, broker_heartbeat_interval_ms) = broker_liveness(p)?;
    let interval_s = p.int("leader.imbalance.check.interval.seconds")? as u64;
    let percent = p.int("leader.imbalance.per.broker.percentage")? as u32;
    Ok(ClusterConfig {
        process_roles: roles(p)?,
        voters,
        controller_listener_names: controller_names(p),
        controller_listeners: listeners.controller.clone(),
        offsets_topic_replication_factor,
        offsets_topic_num_partitions: p.int("offsets.topic.num.partitions")? as i32,
        offsets_topic_segment_bytes: p.int("offsets.topic.segment.bytes")? as i32,
        txn_topic_segment_bytes: p.int("transaction.state.log.segment.bytes")? as i32,
        share_topic_segment_bytes: p.int("share.coordinator.state.topic.segment.bytes")? as i32,
        txn_topic_replication_factor,
        txn_topic_min_isr,
        txn_topic_num_partitions: p.int("transaction.state.log.num.partitions")? as i32,
        share_topic_replication_factor,
        share_topic_min_isr,
        share_topic_num_partitions: p.int("share.coordinator.state.topic.num.partitions")? as i32,
        transaction_max_timeout_ms: p.int("transaction.max.timeout.ms")? as i32,
        transaction_abort_interval_ms: p
            .int("transaction.abort.timed.out.transaction.cleanup.interval.ms")?
            as u64,
        transactional_id_expiration_ms: p.int("transactional.id.expiration.ms")? as u64,
        transaction_id_expiration_check_ms: p
            .int("transaction.remove.expired.transaction.cleanup.interval.ms")?
            as u64,
        transaction_partition_verification: p.bool("transaction.partition.verification.enable")?,
        unclean_leader_election_enable: p.bool("unclean.leader.election.enable")?,
        auto_leader_rebalance: p
            .bool("auto.leader.rebalance.enable")?
            .then_some((std::time::Duration::from_secs(interval_s), percent)),
        replica_lag_time_max_ms: p.int("replica.lag.time.max.ms")? as u64,
        broker_session_timeout_ms,
        broker_heartbeat_interval_ms,
        inter_broker_listener_name,
    })
}

/// An internal topic's replication factor (`offsets.topic.replication.factor`,
/// `transaction.state.log.replication.factor`) as given; unset, Kafka's 3 capped at the
/// size of the quorum, so a single node (a quorum of one) coordinates groups and
/// transactions without being told to.
fn replication_factor(p: &Props<'_>, key: &str, voters: &[Voter]) -> Result<i16, ConfigError> {
    let rf = p.int(key)? as i16;
    Ok(match p.get(key) {
        Some(_) => rf,
        None => rf.min(voters.len().max(1) as i16),
    })
}

/// `process.roles`, lower-cased; empty when unset (a single node, as before KRaft keys).
fn roles(p: &Props<'_>) -> Result<Vec<String>, ConfigError> {
    let roles: Vec<String> = p
        .list("process.roles")
        .into_iter()
        .map(|r| r.to_ascii_lowercase())
        .collect();
    let given = p.text("process.roles");
    if let Some(bad) = roles.iter().find(|r| *r != "broker" && *r != "controller") {
        return Err(invalid(
            "process.roles",
            given,
            &format!("unknown role '{bad}'; roles are broker and controller"),
        ));
    }
    let combined = roles.iter().any(|r| r == "broker") && roles.iter().any(|r| r == "controller");
    if p.get("process.roles").is_some() && !combined {
        return Err(invalid(
            "process.roles",
            given,
            "only combined mode (broker,controller) is supported",
        ));
    }
    Ok(roles)
}

/// `controller.listener.names`, upper-cased like every listener name.
fn controller_names(p: &Props<'_>) -> Vec<String> {
    p.list("controller.listener.names")
        .into_iter()
        .map(|n| n.to_ascii_uppercase())
        .collect()
}

/// A node with roles needs controller listeners, and each must be one of `listeners`.
fn check_controller_names(
    p: &Props<'_>,
    names: &[String],
    listeners: &[Listener],
) -> Result<(), ConfigError> {
    if names.is_empty() {
        return Err(invalid(
            "controller.listener.names",
            "",
            "required when process.roles includes controller",
        ));
    }
    if let Some(n) = names
        .iter()
        .find(|n| !listeners.iter().any(|l| &l.name == *n))
    {
        return Err(invalid(
            "controller.listener.names",
            p.text("controller.listener.names"),
            &format!("{n} is not one of the listeners"),
        ));
    }
    Ok(())
}

/// `listener.security.protocol.map` as given. Unset on a KRaft node, it is Kafka's derived
/// default (`KafkaConfig.effectiveListenerSecurityProtocolMap`): each security protocol
/// names itself, and each controller listener name is PLAINTEXT, so
/// `listeners=PLAINTEXT://...,CONTROLLER://...` works without a map, as in Kafka. Like
/// Kafka, no controller mapping is added once a listener or controller name is SSL or
/// SASL_*, since then PLAINTEXT is not a safe guess.
fn protocol_map(
    p: &Props<'_>,
    kraft: bool,
    controller_names: &[String],
) -> Result<BTreeMap<String, String>, ConfigError> {
    if let Some(given) = p.get("listener.security.protocol.map") {
        return parse_protocol_map(given);
    }
    let mut map = parse_protocol_map(PROTOCOL_MAP_DEFAULT)?;
    let secure = |name: &str| ["SSL", "SASL_PLAINTEXT", "SASL_SSL"].contains(&name);
    let listener_names: Vec<String> = p
        .text("listeners")
        .split(',')
        .filter_map(|l| l.trim().split_once("://"))
        .map(|(name, _)| name.to_ascii_uppercase())
        .collect();
    let any_secure = controller_names
        .iter()
        .chain(&listener_names)
        .any(|n| secure(n));
    if kraft && !any_secure {
        for name in controller_names {
            map.insert(name.clone(), "PLAINTEXT".to_string());
        }
    }
    Ok(map)
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

/// `advertised.listeners`, else the listeners with a routable host; controller listeners
/// are for the quorum and never reach clients' metadata.
fn advertised(
    p: &Props<'_>,
    client: &[Listener],
    controller_names: &[String],
    protocol_map: &BTreeMap<String, String>,
) -> Result<Vec<Listener>, ConfigError> {
    let all = match p.get("advertised.listeners") {
        Some(v) => parse_listener_list("advertised.listeners", v, protocol_map)?,
        None => client
            .iter()
            .map(|l| Listener {
                host: advertised_host(&l.host),
                ..l.clone()
            })
            .collect(),
    };
    let advertised: Vec<Listener> = all
        .into_iter()
        .filter(|l| !controller_names.contains(&l.name))
        .collect();
    if let Some(a) = advertised
        .iter()
        .find(|a| a.host == "0.0.0.0" || a.host == "::")
    {
        return Err(invalid(
            "advertised.listeners",
            &format!("{}://{}:{}", a.name, a.host, a.port),
            "cannot advertise the non-routable meta-address; name a host clients can reach",
        ));
    }
    Ok(advertised)
}

/// Kafka advertises the canonical host name for a listener bound to all interfaces; we
/// advertise loopback, which is what a single-node default should answer.
fn advertised_host(bind_host: &str) -> String {
    match bind_host {
        "" | "0.0.0.0" | "::" => "127.0.0.1".to_string(),
        h => h.to_string(),
    }
}

fn parse_listener_list(
    key: &str,
    v: &str,
    protocol_map: &BTreeMap<String, String>,
) -> Result<Vec<Listener>, ConfigError> {
    let mut out: Vec<Listener> = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let listener = parse_listener(key, v, entry, protocol_map)?;
        if out.iter().any(|l| l.name == listener.name) {
            return Err(invalid(
                key,
                v,
                &format!("listener name {} appears twice", listener.name),
            ));
        }
        out.push(listener);
    }
    Ok(out)
}

/// One `NAME://host:port` entry of `v`, the value of `key`.
fn parse_listener(
    key: &str,
    v: &str,
    entry: &str,
    protocol_map: &BTreeMap<String, String>,
) -> Result<Listener, ConfigError> {
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
    if !["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"].contains(&protocol.as_str()) {
        return Err(invalid(
            key,
            v,
            &format!(
                "listener {name}'s security protocol {protocol} is not one of PLAINTEXT, SSL, \
                 SASL_PLAINTEXT and SASL_SSL"
            ),
        ));
    }
    let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
        rest.split_once("]:")
            .ok_or_else(|| invalid(key, v, "IPv6 hosts must look like [::1]:9092"))?
    } else {
        addr.rsplit_once(':')
            .ok_or_else(|| invalid(key, v, "missing :port"))?
    };
    let port: u16 = port.parse().map_err(|_| {
        invalid(
            key,
            v,
            &format!("port '{port}' is not a number from 0 to 65535"),
        )
    })?;
    Ok(Listener {
        name,
        host: host.to_string(),
        port,
    })
}

/// `controller.quorum.voters` (`id@host:port,...`); this node must be one of them.
fn voters(p: &Props<'_>, node_id: i32) -> Result<Vec<Voter>, ConfigError> {
    let raw = p.text("controller.quorum.voters");
    let mut voters: Vec<Voter> = Vec::new();
    for entry in p.list("controller.quorum.voters") {
        let voter =
            parse_voter(&entry).map_err(|why| invalid("controller.quorum.voters", raw, &why))?;
        if voters.iter().any(|v| v.id == voter.id) {
            return Err(invalid(
                "controller.quorum.voters",
                raw,
                &format!("voter {} is listed twice", voter.id),
            ));
        }
        voters.push(voter);
    }
    if !voters.is_empty() && !voters.iter().any(|v| v.id == node_id) {
        return Err(invalid(
            "controller.quorum.voters",
            raw,
            &format!("node.id {node_id} is not one of the voters (combined mode)"),
        ));
    }
    Ok(voters)
}

/// One `id@host:port` entry; the error says what is wrong with it.
fn parse_voter(entry: &str) -> Result<Voter, String> {
    let (id, addr) = entry
        .split_once('@')
        .ok_or("entries must look like 1@host:9093")?;
    let id: i32 = id
        .trim()
        .parse()
        .map_err(|_| format!("voter id '{id}' is not a number"))?;
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("voter {id} has no :port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("voter {id}: port '{port}' is not a number from 0 to 65535"))?;
    Ok(Voter {
        id,
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
    })
}

/// In a replicated cluster the other voters reach this one at its voter port, so a
/// controller listener must listen there.
fn check_own_voter_port(
    p: &Props<'_>,
    node_id: i32,
    voters: &[Voter],
    controller: &[Listener],
) -> Result<(), ConfigError> {
    if voters.len() <= 1 {
        return Ok(());
    }
    let Some(me) = voters.iter().find(|v| v.id == node_id) else {
        return Ok(());
    };
    if controller.iter().any(|l| l.port == me.port) {
        return Ok(());
    }
    Err(invalid(
        "controller.quorum.voters",
        p.text("controller.quorum.voters"),
        &format!(
            "voter {node_id} (this node) is at port {}, but no controller listener listens there",
            me.port
        ),
    ))
}

/// `inter.broker.listener.name`, which must be a client listener.
fn inter_broker_listener_name(
    p: &Props<'_>,
    client: &[Listener],
) -> Result<Option<String>, ConfigError> {
    let Some(name) = p.get("inter.broker.listener.name") else {
        return Ok(None);
    };
    let name = name.to_ascii_uppercase();
    if !client.iter().any(|l| l.name == name) {
        return Err(invalid(
            "inter.broker.listener.name",
            &name,
            "must name one of the (non-controller) listeners",
        ));
    }
    Ok(Some(name))
}

/// `broker.session.timeout.ms` and `broker.heartbeat.interval.ms`: a broker must be able
/// to heartbeat more than once per session.
fn broker_liveness(p: &Props<'_>) -> Result<(u64, u64), ConfigError> {
    let session_ms = p.int("broker.session.timeout.ms")? as u64;
    let heartbeat_ms = p.int("broker.heartbeat.interval.ms")? as u64;
    if heartbeat_ms >= session_ms {
        return Err(invalid(
            "broker.heartbeat.interval.ms",
            &heartbeat_ms.to_string(),
            "must be below broker.session.timeout.ms",
        ));
    }
    Ok((session_ms, heartbeat_ms))
}
