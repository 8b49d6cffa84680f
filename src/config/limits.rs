//! Connection limits as Kafka's SocketServer reads them: `max.connections` for the broker
//! (the inter-broker listener is exempt when there are others) and per listener
//! (`listener.name.<l>.max.connections`), where a listener at its limit stops accepting
//! until a connection closes; and `max.connections.per.ip` with
//! `max.connections.per.ip.overrides` (`host:n,ip:n`), where a connection over its
//! address's limit is accepted and closed at once; and `max.connection.creation.rate`, for
//! the broker and per listener, past which the listener waits before accepting.

use std::collections::BTreeMap;
use std::net::{IpAddr, ToSocketAddrs};

use super::keys::Props;
use super::{invalid, ConfigError};

/// Kafka's default for every limit: none.
const UNLIMITED: i64 = i32::MAX as i64;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `max.connections`, when set below the default.
    pub broker: Option<usize>,
    /// `listener.name.<l>.max.connections` by listener name, where set below the default.
    pub listener: BTreeMap<String, usize>,
    /// `max.connections.per.ip`, when set below the default.
    pub per_ip: Option<usize>,
    /// `max.connections.per.ip.overrides`, host names resolved at start-up.
    pub per_ip_overrides: BTreeMap<IpAddr, usize>,
    /// `max.connection.creation.rate` (connections per second), when set below the default.
    pub rate: Option<u32>,
    /// `listener.name.<l>.max.connection.creation.rate` by listener name, where set below
    /// the default.
    pub listener_rate: BTreeMap<String, u32>,
}

impl ConnectionLimits {
    /// How many connections `ip` may hold; `None`: no limit.
    pub fn per_ip(&self, ip: IpAddr) -> Option<usize> {
        self.per_ip_overrides.get(&ip).copied().or(self.per_ip)
    }
}

/// The limits of the listeners named `listeners`.
pub(super) fn parse(p: &Props<'_>, listeners: &[String]) -> Result<ConnectionLimits, ConfigError> {
    let limited = |n: i64| (n < UNLIMITED).then_some(n as usize);
    let mut listener = BTreeMap::new();
    let mut listener_rate = BTreeMap::new();
    for name in listeners {
        let own = |key: &str| format!("listener.name.{}.{key}", name.to_ascii_lowercase());
        let key = own("max.connections");
        if p.get(&key).is_some() {
            if let Some(n) = limited(p.int_first(&[key], "max.connections")?) {
                listener.insert(name.clone(), n);
            }
        }
        let key = own("max.connection.creation.rate");
        if p.get(&key).is_some() {
            if let Some(n) = limited(p.int_first(&[key], "max.connection.creation.rate")?) {
                listener_rate.insert(name.clone(), n as u32);
            }
        }
    }
    let per_ip = p.int("max.connections.per.ip")?;
    let per_ip_overrides = overrides(p)?;
    if per_ip == 0 && per_ip_overrides.is_empty() {
        return Err(invalid(
            "max.connections.per.ip",
            "0",
            "may be 0 only when max.connections.per.ip.overrides names the addresses that \
             may connect",
        ));
    }
    Ok(ConnectionLimits {
        broker: limited(p.int("max.connections")?),
        listener,
        per_ip: limited(per_ip),
        per_ip_overrides,
        rate: limited(p.int("max.connection.creation.rate")?).map(|n| n as u32),
        listener_rate,
    })
}

/// `host:n,ip:n`: each host's addresses (a name is resolved now, as Kafka does) and its limit.
fn overrides(p: &Props<'_>) -> Result<BTreeMap<IpAddr, usize>, ConfigError> {
    const KEY: &str = "max.connections.per.ip.overrides";
    let value = p.text(KEY);
    let mut out = BTreeMap::new();
    for entry in p.list(KEY) {
        let bad = |why: &str| invalid(KEY, value, &format!("{entry}: {why}"));
        let (host, n) = entry
            .rsplit_once(':')
            .ok_or_else(|| bad("expected host:count"))?;
        let n: usize = n
            .trim()
            .parse()
            .ok()
            .filter(|n| *n <= UNLIMITED as usize)
            .ok_or_else(|| bad("the count must be a whole number from 0"))?;
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => (host, 0)
                .to_socket_addrs()
                .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?
                .map(|a| a.ip())
                .collect(),
        };
        for ip in ips {
            out.insert(ip.to_canonical(), n);
        }
    }
    Ok(out)
}
