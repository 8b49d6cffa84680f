//! Connection limits on the listeners ([`crate::config::limits`]): an accepted connection
//! takes a slot of its listener's limit and of the broker's (unless it is the inter-broker
//! listener and there are others, as in Kafka), waiting for one at a limit while the
//! listener accepts nothing else, as Kafka's acceptor blocks; then a connection over its
//! address's limit is closed at once. A slot and an address's count are given back when
//! the connection ends.
//!
//! Connection rates, as Kafka's ConnectionQuotas keeps them: `max.connection.creation.rate`
//! (the broker's, which the inter-broker listener is exempt from in the same way, and the
//! listener's own) counts each connection accepted and, past the rate, holds the listener
//! back for up to a second before it accepts the next; an address's
//! `connection_creation_rate` client quota (`kafka-configs --entity-type ips`) refuses a
//! connection past it, which is closed once its throttle has passed and does not count
//! against any rate.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::broker::throttle::Rate;

use crate::config::limits::ConnectionLimits;
use crate::config::Config;

/// One listener's limits.
pub(super) struct Limits {
    /// Its own limit, then the broker's; either may be absent.
    slots: Vec<Arc<Semaphore>>,
    /// Its own connection rate, then the broker's, with their bounds; either may be absent.
    rates: Vec<(Arc<Mutex<Rate>>, f64)>,
    per_ip: Arc<PerIp>,
}

/// The connections each address holds, and each rate-limited address's rate, broker-wide.
pub(super) struct PerIp {
    limits: ConnectionLimits,
    open: Mutex<HashMap<IpAddr, usize>>,
    rates: Mutex<HashMap<IpAddr, Rate>>,
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
    let rate = |n: u32| (Arc::new(Mutex::new(Rate::default())), n as f64);
    let broker_rate = limits.rate.map(rate);
    let per_ip = Arc::new(PerIp {
        limits: limits.clone(),
        open: Mutex::default(),
        rates: Mutex::default(),
    });
    // As Kafka: the inter-broker listener is exempt from the broker's limits, unless it
    // is the only listener.
    let inter_broker = config.inter_broker_listener();
    let exempt = |name: &str| name == inter_broker && config.listeners.len() > 1;
    config
        .listeners
        .iter()
        .map(|l| {
            let own = limits
                .listener
                .get(&l.name)
                .map(|&n| Arc::new(Semaphore::new(n)));
            let shared = broker.clone().filter(|_| !exempt(&l.name));
            let slots = own.into_iter().chain(shared).collect();
            let own_rate = limits.listener_rate.get(&l.name).map(|&n| rate(n));
            let shared_rate = broker_rate.clone().filter(|_| !exempt(&l.name));
            (
                l.name.clone(),
                Limits {
                    slots,
                    rates: own_rate.into_iter().chain(shared_rate).collect(),
                    per_ip: per_ip.clone(),
                },
            )
        })
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Limits {
    /// Counts a connection just accepted against this listener's connection rates and
    /// waits as long as the longest of them needs (at most a second; nothing meanwhile
    /// is accepted, as Kafka's acceptor waits).
    pub(super) async fn pace(&self) {
        let now = crate::clock::now_ms_unsigned();
        let wait = self
            .rates
            .iter()
            .map(|(rate, bound)| lock(rate).record(1.0, *bound, now))
            .max()
            .unwrap_or(0);
        if wait > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        }
    }

    /// Checks a connection from `ip` against the address's `connection_creation_rate`
    /// (`rate`, `None`: no quota applies): `Err(ms)` refuses it, to be closed after `ms`.
    /// A refused connection is taken back from every rate it was counted in.
    pub(super) fn paced_by_address(&self, ip: IpAddr, rate: Option<f64>) -> Result<(), u64> {
        let Some(bound) = rate else {
            return Ok(());
        };
        let (ip, now) = (ip.to_canonical(), crate::clock::now_ms_unsigned());
        let mut rates = lock(&self.per_ip.rates);
        if rates.len() > 1024 {
            rates.retain(|_, r| !r.idle(now));
        }
        let r = rates.entry(ip).or_default();
        let ms = r.record(1.0, bound, now);
        if ms == 0 {
            return Ok(());
        }
        r.unrecord(1.0, now);
        for (rate, _) in &self.rates {
            lock(rate).unrecord(1.0, now);
        }
        Err(ms)
    }

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
