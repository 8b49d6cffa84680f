//! Client byte-rate quotas applied to traffic, as Kafka's ClientQuotaManager applies them:
//! each usage (a user, a client id, or both, as [`quotas::applying`] tags it) has a rate
//! over 11 one-second samples; a request that takes the rate above its quota is throttled
//! for as long as the rate needs to come back to it (unbounded, as Kafka's byte-rate
//! throttles are; the request-time throttle is at most one sample, as Kafka's
//! ClientRequestQuotaManager bounds it). What throttling does to the connection and the
//! response is the handlers', dispatch's and the server's.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::controller::quotas::{self, Applied};

/// Kafka's `quota.window.num` and `quota.window.size.seconds`.
const SAMPLES: usize = 11;
const SAMPLE_MS: u64 = 1000;
/// The longest throttle a response's `throttle_time_ms` can carry.
const THROTTLE_MAX_MS: u64 = i32::MAX as u64;
/// A usage no request touched for this long is forgotten, as Kafka expires its sensors.
const INACTIVE_MS: u64 = 3_600_000;

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Bytes of Produce requests (`producer_byte_rate`).
    Produce,
    /// Bytes of consumers' Fetch responses (`consumer_byte_rate`).
    Fetch,
    /// Partitions created or deleted (`controller_mutation_rate`, KIP-599), measured by
    /// [`Throttles::mutations_exhausted`] and [`Throttles::record_mutations`].
    ControllerMutation,
    /// Thread time of requests, in percent of one thread (`request_percentage`): each
    /// request records its [`crate::thread_time`] as percent-seconds.
    Request,
}

impl Kind {
    /// The quota's key in the metadata log.
    pub fn key(self) -> &'static str {
        match self {
            Kind::Produce => "producer_byte_rate",
            Kind::Fetch => "consumer_byte_rate",
            Kind::ControllerMutation => "controller_mutation_rate",
            Kind::Request => "request_percentage",
        }
    }

    /// The longest throttle one request earns: Kafka bounds the request-time throttle by
    /// its quota window's sample (`quota.window.size.seconds`), the others only by what
    /// `throttle_time_ms` can carry.
    fn throttle_max_ms(self) -> u64 {
        match self {
            Kind::Request => SAMPLE_MS,
            _ => THROTTLE_MAX_MS,
        }
    }
}

/// One sample of a sampled stat: when it began, and what it holds.
#[derive(Clone, Copy, Default)]
struct Sample {
    start_ms: u64,
    total: f64,
    count: u64,
}

/// Kafka's SampledStat: up to [`SAMPLES`] samples of [`SAMPLE_MS`] each, the oldest reused
/// when a new one begins, any older than the whole window reset before a measure.
#[derive(Default)]
struct Sampled {
    samples: Vec<Sample>,
    current: usize,
}

impl Sampled {
    fn record(&mut self, value: f64, now_ms: u64) {
        if self.samples.is_empty() {
            self.samples.push(Sample {
                start_ms: now_ms,
                ..Sample::default()
            });
        }
        if now_ms.saturating_sub(self.samples[self.current].start_ms) >= SAMPLE_MS {
            self.current = (self.current + 1) % SAMPLES;
            let fresh = Sample {
                start_ms: now_ms,
                ..Sample::default()
            };
            match self.samples.get_mut(self.current) {
                Some(s) => *s = fresh,
                None => self.samples.push(fresh),
            }
        }
        let s = &mut self.samples[self.current];
        s.total += value;
        s.count += 1;
    }

    fn purge(&mut self, now_ms: u64) {
        for s in &mut self.samples {
            if now_ms.saturating_sub(s.start_ms) >= SAMPLES as u64 * SAMPLE_MS {
                *s = Sample {
                    start_ms: now_ms,
                    ..Sample::default()
                };
            }
        }
    }

    /// Kafka's Rate: the samples' total over the time since the oldest began, counted as
    /// at least ten whole samples so a new usage is not judged on its first instant.
    fn rate(&mut self, now_ms: u64) -> f64 {
        self.purge(now_ms);
        let total: f64 = self.samples.iter().map(|s| s.total).sum();
        total / (self.window_ms(now_ms) as f64 / 1000.0)
    }

    /// The window [`rate`](Self::rate) divides by, in ms: the time since the oldest sample
    /// began, plus a second for each of ten whole samples it does not span yet.
    fn window_ms(&self, now_ms: u64) -> u64 {
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let window = now_ms.saturating_sub(oldest);
        let full = window / SAMPLE_MS;
        let least = SAMPLES as u64 - 1;
        window + least.saturating_sub(full) * SAMPLE_MS
    }

    /// How long the rate needs to come back to `bound`, in ms, as Kafka's QuotaUtils
    /// works it out: `(rate - bound) / bound` of the window (the whole window for a bound
    /// of 0); 0 within it.
    fn over(&mut self, bound: f64, now_ms: u64) -> u64 {
        let rate = self.rate(now_ms);
        if rate <= bound {
            return 0;
        }
        let window = self.window_ms(now_ms) as f64;
        let over = match bound > 0.0 {
            true => (rate - bound) / bound * window,
            false => window,
        };
        over.round() as u64
    }

    /// Kafka's Avg: the mean of the values recorded in the window, 0 with none.
    fn average(&mut self, now_ms: u64) -> f64 {
        self.purge(now_ms);
        let (total, count) = self
            .samples
            .iter()
            .fold((0.0, 0), |(t, c), s| (t + s.total, c + s.count));
        if count == 0 {
            0.0
        } else {
            total / count as f64
        }
    }
}

/// A rate with an upper bound, as Kafka's connection quotas keep them
/// (`max.connection.creation.rate`, `connection_creation_rate`): the same samples as the
/// byte rates, each throttle at most one sample long (Kafka's `quota.window.size.seconds`).
#[derive(Default)]
pub struct Rate {
    sampled: Sampled,
    last_ms: u64,
}

impl Rate {
    /// Records `value` (a connection is 1); returns how long the rate needs to come back
    /// to `bound`, in ms, at most one sample (0: within it).
    pub fn record(&mut self, value: f64, bound: f64, now_ms: u64) -> u64 {
        self.last_ms = now_ms;
        self.sampled.record(value, now_ms);
        self.sampled.over(bound, now_ms).min(SAMPLE_MS)
    }

    /// Takes back a value [`record`](Self::record) counted (a connection refused).
    pub fn unrecord(&mut self, value: f64, now_ms: u64) {
        self.sampled.record(-value, now_ms);
    }

    /// Whether nothing was recorded for a whole window: the rate is 0 and may be dropped.
    pub fn idle(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_ms) >= SAMPLES as u64 * SAMPLE_MS
    }
}

/// One usage: its bytes, the throttles it earned, and when it was last used.
#[derive(Default)]
struct Usage {
    bytes: Sampled,
    throttles: Sampled,
    last_ms: u64,
}

/// A usage as the metrics show it.
pub struct Measured {
    pub kind: Kind,
    pub user: String,
    pub client_id: String,
    /// Bytes per second over the window; for [`Kind::Request`], percent of a thread.
    pub rate: f64,
    /// The mean throttle in the window, in ms.
    pub throttle_time_ms: f64,
}

/// Kafka's TokenBucket: up to a burst of the quota times the whole window, refilled at the
/// quota per second. A new bucket starts full; recording may take it below zero, and it is
/// exhausted until it refills back to zero.
struct Bucket {
    tokens: f64,
    last_ms: u64,
}

impl Bucket {
    fn refill(&mut self, bound: f64, now_ms: u64) {
        let burst = bound * (SAMPLES as u64 * SAMPLE_MS) as f64 / 1000.0;
        let elapsed = now_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.tokens = (self.tokens + bound * elapsed).min(burst);
        self.last_ms = now_ms;
    }

    /// How long until an empty bucket is back at zero, in ms (0 when it is not empty): as
    /// Kafka's `throttleTimeMs`, the missing tokens over the refill rate.
    fn throttle_ms(&self, bound: f64) -> u64 {
        match (self.tokens < 0.0, bound > 0.0) {
            (false, _) => 0,
            (true, true) => ((-self.tokens / bound * 1000.0).round() as u64).min(THROTTLE_MAX_MS),
            (true, false) => THROTTLE_MAX_MS,
        }
    }
}

/// Every usage a quota applies to, by kind and tags.
#[derive(Default)]
pub struct Throttles {
    usages: Mutex<HashMap<(Kind, String, String), Usage>>,
    /// `controller_mutation_rate`'s buckets, by user and client id.
    buckets: Mutex<HashMap<(String, String), Bucket>>,
}

impl Throttles {
    fn usages(&self) -> std::sync::MutexGuard<'_, HashMap<(Kind, String, String), Usage>> {
        self.usages.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `bytes` (percent-seconds for [`Kind::Request`]) against `quota`'s usage;
    /// returns how long the client is throttled, in ms (0: within its quota). As Kafka:
    /// `(rate - quota) / quota` of the window (the whole window for a quota of 0), at most
    /// the kind's bound.
    pub fn record(&self, kind: Kind, quota: &Applied, bytes: f64, now_ms: u64) -> u64 {
        let mut usages = self.usages();
        if usages.len() > 1024 {
            usages.retain(|_, u| now_ms.saturating_sub(u.last_ms) < INACTIVE_MS);
        }
        let u = usages
            .entry((kind, quota.user.clone(), quota.client_id.clone()))
            .or_default();
        u.last_ms = now_ms;
        u.bytes.record(bytes, now_ms);
        let ms = u
            .bytes
            .over(quota.bound, now_ms)
            .min(kind.throttle_max_ms());
        if ms > 0 {
            u.throttles.record(ms as f64, now_ms);
        }
        ms
    }

    /// Takes back bytes [`record`](Self::record) counted, as Kafka does for a throttled
    /// fetch, whose records are not sent.
    pub fn unrecord(&self, kind: Kind, quota: &Applied, bytes: f64, now_ms: u64) {
        if let Some(u) = self
            .usages()
            .get_mut(&(kind, quota.user.clone(), quota.client_id.clone()))
        {
            u.bytes.record(-bytes, now_ms);
        }
    }

    fn bucket<T>(&self, quota: &Applied, now_ms: u64, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > 1024 {
            buckets.retain(|_, b| now_ms.saturating_sub(b.last_ms) < INACTIVE_MS);
        }
        let b = buckets
            .entry((quota.user.clone(), quota.client_id.clone()))
            .or_insert(Bucket {
                tokens: f64::INFINITY,
                last_ms: now_ms,
            });
        b.refill(quota.bound, now_ms);
        f(b)
    }

    /// Whether `quota`'s mutations are used up: how long until they are not, in ms (0: the
    /// next mutation may go ahead). What KIP-599's strict mode asks before each topic.
    pub fn mutations_exhausted(&self, quota: &Applied, now_ms: u64) -> u64 {
        self.bucket(quota, now_ms, |b| b.throttle_ms(quota.bound))
    }

    /// Counts `partitions` created or deleted against `quota`; returns the throttle that
    /// leaves, in ms (0 while the bucket holds tokens).
    pub fn record_mutations(&self, quota: &Applied, partitions: f64, now_ms: u64) -> u64 {
        self.bucket(quota, now_ms, |b| {
            b.tokens -= partitions;
            b.throttle_ms(quota.bound)
        })
    }

    /// Every usage seen in the last hour, for the metrics.
    pub fn measured(&self, now_ms: u64) -> Vec<Measured> {
        let mut usages = self.usages();
        usages.retain(|_, u| now_ms.saturating_sub(u.last_ms) < INACTIVE_MS);
        usages
            .iter_mut()
            .map(|((kind, user, client_id), u)| Measured {
                kind: *kind,
                user: user.clone(),
                client_id: client_id.clone(),
                rate: u.bytes.rate(now_ms),
                throttle_time_ms: u.throttles.average(now_ms),
            })
            .collect()
    }
}

/// The quota of `kind` that applies to `principal` (`User:name`) with `client_id`.
pub fn applying(
    table: &quotas::Table,
    kind: Kind,
    principal: &str,
    client_id: &str,
) -> Option<Applied> {
    if table.is_empty() {
        return None;
    }
    let user = principal.strip_prefix("User:").unwrap_or(principal);
    quotas::applying(table, user, client_id, kind.key())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(bound: f64) -> Applied {
        Applied {
            bound,
            user: String::new(),
            client_id: "c".into(),
        }
    }

    /// A new usage is measured over at least ten seconds, so its first second's burst
    /// may reach ten times the quota before a throttle.
    #[test]
    fn a_burst_is_measured_over_ten_seconds() {
        let t = Throttles::default();
        let q = quota(1000.0);
        assert_eq!(t.record(Kind::Produce, &q, 9_000.0, 0), 0);
        assert_eq!(t.record(Kind::Produce, &q, 1_000.0, 100), 0);
        // 11,000 bytes over 10.2 s: 1078 B/s, 7.8% over the quota of 10.2 s.
        let ms = t.record(Kind::Produce, &q, 1_000.0, 200);
        assert_eq!(ms, 800);
    }

    /// Twice the quota throttles for the window, and more for more, as in Kafka.
    #[test]
    fn throttles_grow_with_the_excess() {
        let t = Throttles::default();
        let q = quota(1000.0);
        assert_eq!(t.record(Kind::Produce, &q, 20_000.0, 0), 10_000);
        assert_eq!(t.record(Kind::Produce, &q, 80_000.0, 0), 90_000);
        assert_eq!(t.record(Kind::Produce, &q, 1e12, 0), THROTTLE_MAX_MS);
        // Another kind and another usage are measured apart.
        assert_eq!(t.record(Kind::Fetch, &q, 1_000.0, 0), 0);
        let other = Applied {
            client_id: "d".into(),
            ..quota(1000.0)
        };
        assert_eq!(t.record(Kind::Produce, &other, 1_000.0, 0), 0);
    }

    /// A request throttle is at most one sample (Kafka's bound), however far over the
    /// quota the thread time goes; the other kinds are not bounded so.
    #[test]
    fn request_throttles_are_at_most_a_second() {
        let t = Throttles::default();
        // 10 % of a thread, and a request that took a whole second (100 percent-seconds).
        let q = quota(10.0);
        assert_eq!(t.record(Kind::Request, &q, 50.0, 0), 0);
        assert_eq!(t.record(Kind::Request, &q, 100.0, 0), SAMPLE_MS);
        assert!(t.record(Kind::Produce, &q, 150.0, 0) > SAMPLE_MS);
    }

    /// Bytes taken back no longer count; samples older than the window are dropped.
    #[test]
    fn unrecorded_and_old_bytes_stop_counting() {
        let t = Throttles::default();
        let q = quota(1000.0);
        assert_eq!(t.record(Kind::Fetch, &q, 10_000.0, 0), 0);
        assert!(t.record(Kind::Fetch, &q, 10_000.0, 10) > 0);
        t.unrecord(Kind::Fetch, &q, 10_000.0, 10);
        assert_eq!(t.record(Kind::Fetch, &q, 0.0, 20), 0);
        // 11 s later the first samples are gone: 5,000 bytes in the new window are fine.
        assert_eq!(t.record(Kind::Fetch, &q, 5_000.0, 11_100), 0);
        let m = t.measured(11_100);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].rate, 500.0);
        assert_eq!(m[0].throttle_time_ms, 0.0, "the throttle was 11 s ago");
    }

    /// Samples roll over second by second and the window then follows the oldest one: a
    /// client a tenth below its quota, sending every 100 ms, is never throttled.
    #[test]
    fn a_steady_rate_below_the_quota_is_not_throttled() {
        let t = Throttles::default();
        let q = quota(1000.0);
        for i in 0..300 {
            assert_eq!(
                t.record(Kind::Produce, &q, 90.0, i * 100),
                0,
                "at {} ms",
                i * 100
            );
        }
        let m = t.measured(29_900);
        assert!((900.0..1000.0).contains(&m[0].rate), "{}", m[0].rate);
    }

    /// A connection rate of 2/s lets twenty through at once (the window is at least ten
    /// seconds), then throttles each further one for as long as the rate needs, at most a
    /// second; a refused connection taken back does not count.
    #[test]
    fn connection_rates_throttle_at_most_a_second() {
        let mut r = Rate::default();
        for _ in 0..20 {
            assert_eq!(r.record(1.0, 2.0, 5_000), 0);
        }
        // 21 in 10 s: 5% over, a twentieth of the window.
        assert_eq!(r.record(1.0, 2.0, 5_000), 500);
        r.unrecord(1.0, 5_000);
        assert_eq!(r.record(1.0, 2.0, 5_000), 500);
        // 22: a tenth over; 23: 15% over, 1.5 s, capped.
        assert_eq!(r.record(1.0, 2.0, 5_000), 1_000);
        assert_eq!(r.record(1.0, 2.0, 5_000), 1_000);
        assert_eq!(r.record(1.0, 0.0, 5_000), 1_000, "a bound of 0");
        assert!(!r.idle(15_999));
        assert!(r.idle(16_000));
    }

    /// KIP-599's bucket: a burst of eleven seconds of the rate, then refilled at the rate;
    /// exhausted once below zero, for as long as it takes to refill to zero.
    #[test]
    fn mutations_take_tokens_from_a_bucket_that_refills_at_the_rate() {
        let t = Throttles::default();
        let q = quota(2.0);
        assert_eq!(t.mutations_exhausted(&q, 1_000), 0);
        // The burst is 22 partitions: 20 leave two tokens, 5 more leave three missing.
        assert_eq!(t.record_mutations(&q, 20.0, 1_000), 0);
        assert_eq!(t.mutations_exhausted(&q, 1_000), 0);
        assert_eq!(t.record_mutations(&q, 5.0, 1_000), 1_500);
        assert_eq!(t.mutations_exhausted(&q, 1_000), 1_500);
        // Half a second refills one token.
        assert_eq!(t.mutations_exhausted(&q, 1_500), 1_000);
        assert_eq!(t.mutations_exhausted(&q, 2_500), 0);
        // A long pause refills the bucket to its burst, no further.
        assert_eq!(t.record_mutations(&q, 22.0, 60_000), 0);
        assert_eq!(t.record_mutations(&q, 1.0, 60_000), 500);
        // Other clients have their own buckets.
        let other = Applied {
            client_id: "d".into(),
            ..quota(2.0)
        };
        assert_eq!(t.mutations_exhausted(&other, 60_000), 0);
    }

    #[test]
    fn the_principal_is_the_user_and_no_table_means_no_quota() {
        let mut table = quotas::Table::new();
        assert_eq!(applying(&table, Kind::Produce, "User:alice", "c"), None);
        let entity: quotas::Entity = [(quotas::USER.to_string(), Some("alice".to_string()))]
            .into_iter()
            .collect();
        quotas::apply(
            &mut table,
            &entity,
            "producer_byte_rate",
            Some(quotas::Value(5.0)),
        );
        let a = applying(&table, Kind::Produce, "User:alice", "c").unwrap();
        assert_eq!(
            (a.bound, a.user.as_str(), a.client_id.as_str()),
            (5.0, "alice", "")
        );
        assert_eq!(applying(&table, Kind::Fetch, "User:alice", "c"), None);
        assert_eq!(applying(&table, Kind::Produce, "User:bob", "c"), None);
    }
}
