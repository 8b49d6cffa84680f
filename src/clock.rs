//! Wall-clock time in Kafka's unit (milliseconds since the Unix epoch), for what is stored or
//! sent: record timestamps, commit times, expiry. Deadlines and timeouts use tokio's clock
//! instead, so tests can pause it.

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// [`now_ms`] as the unsigned milliseconds quotas and throttles count in.
pub fn now_ms_unsigned() -> u64 {
    now_ms().max(0) as u64
}
