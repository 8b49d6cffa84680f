//! Connection limits on the listeners ([`crate::config::limits`]): an accepted connection
//! takes a slot of its listener's limit and of the broker's (unless it is the inter-broker
//! listener), waiting for one at a limit while the listener accepts nothing else, as
//! Kafka's acceptor blocks; then a connection over its address's limit is closed at once.
//! A slot and an address's count are given back when the connection ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::limits::ConnectionLimits;
use crate::config::Config;

/// One listener's limits.
pub(super) struct Limits {
    /// Its own limit, then the broker's; either may be absent.
    slots: Vec<Arc<Semaphore>>,
    per_ip: Arc<PerIp>,
}

/// The connections each address holds, broker-wide.
pub(super) struct PerIp {
    limits: ConnectionLimits,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection's place under the limits, given back when dropped.
pub(super) struct Slot {
    _permits: Vec<OwnedSemaphorePermit>,
    ip: Option<(Arc<PerIp>, IpAddr)>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((per_ip, ip)) = &self.ip {
            let mut open = per_ip.open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = open.get_mut(ip) {
                *n -= 1;
                if *n == 0 {
                    open.remove(ip);
                }
            }
        }
    }
}

/// The limits of every listener, sharing the broker's and the addresses' counts.
pub(super) fn by_listener(config: &Config) -> HashMap<String, Limits> {
    let limits = &config.connection_limits;
    let broker = limits.broker.map(|n| Arc::new(Semaphore::new(n)));
    let per_ip = Arc::new(PerIp {
        limits: limits.clone(),
        open: Mutex::default(),
    });
    let inter_broker = config.inter_broker_listener();
    config
        .listeners
        .iter()
        .map(|l| {
            let own = limits
                .listener
                .get(&l.name)
                .map(|&n| Arc::new(Semaphore::new(n)));
            let shared = broker.clone().filter(|_| l.name != inter_broker);
            let slots = own.into_iter().chain(shared).collect();
            (
                l.name.clone(),
                Limits {
                    slots,
                    per_ip: per_ip.clone(),
                },
            )
        })
        .collect()
}

impl Limits {
    /// Waits for a free slot of each of this listener's limits.
    pub(super) async fn slot(&self) -> Slot {
        let mut permits = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            permits.push(s.clone().acquire_owned().await.expect("never closed"));
        }
        Slot {
            _permits: permits,
            ip: None,
        }
    }

    /// Counts a connection from `ip` in `slot`; false when `ip` holds its limit already.
    /// An IPv4 peer reaching a dual-stack socket (`::ffff:a.b.c.d`) counts as `a.b.c.d`.
    pub(super) fn admit(&self, slot: &mut Slot, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        let Some(limit) = self.per_ip.limits.per_ip(ip) else {
            return true;
        };
        let mut open = self.per_ip.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.get(&ip).copied().unwrap_or(0) >= limit {
            return false;
        }
        *open.entry(ip).or_default() += 1;
        slot.ip = Some((self.per_ip.clone(), ip));
        true
    }
}
