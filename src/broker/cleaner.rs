//! The log cleaner's schedule: which compacted partition is cleaned next, as Kafka's
//! `LogCleanerManager.grabFilthiestCompactedLog` chooses, on one background task.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{next_pass, Broker};
use crate::log::clean::{CleanReport, CleanRules};
use crate::topics::{Partition, Topic};

/// What the cleaner last did, for Kafka's `LogCleaner` and `LogCleanerManager` gauges
/// (computed when scraped).
pub struct CleanerStats {
    /// When the cleaner last looked for a partition to clean (ms since the epoch).
    pub last_run_ms: AtomicI64,
    /// The highest dirty ratio among compacted partitions at that look, in percent.
    pub max_dirty_percent: AtomicI64,
    /// The last pass: how long it took (s), how full its offset map was and how many bytes
    /// it wrote per byte read (percent).
    pub clean_time_secs: AtomicI64,
    pub buffer_utilization_percent: AtomicI64,
    pub recopy_percent: AtomicI64,
    /// Compacted partitions whose last pass failed.
    uncleanable: Mutex<HashSet<(String, i32)>>,
}

impl Default for CleanerStats {
    fn default() -> CleanerStats {
        CleanerStats {
            last_run_ms: AtomicI64::new(crate::clock::now_ms()),
            max_dirty_percent: AtomicI64::new(0),
            clean_time_secs: AtomicI64::new(0),
            buffer_utilization_percent: AtomicI64::new(0),
            recopy_percent: AtomicI64::new(0),
            uncleanable: Mutex::new(HashSet::new()),
        }
    }
}

impl CleanerStats {
    pub fn uncleanable_count(&self) -> usize {
        self.uncleanable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    fn mark(&self, topic: &str, partition: i32, failed: bool) {
        let mut set = self.uncleanable.lock().unwrap_or_else(|e| e.into_inner());
        match failed {
            true => set.insert((topic.to_string(), partition)),
            false => set.remove(&(topic.to_string(), partition)),
        };
    }

    fn passed(&self, r: &CleanReport, map_limit: usize, took: Duration) {
        let percent = |part: u64, whole: u64| (part * 100).checked_div(whole).unwrap_or(0) as i64;
        self.clean_time_secs
            .store(took.as_secs() as i64, Ordering::Relaxed);
        self.buffer_utilization_percent.store(
            percent(r.map_bytes as u64, map_limit as u64),
            Ordering::Relaxed,
        );
        self.recopy_percent
            .store(percent(r.bytes_after, r.bytes_before), Ordering::Relaxed);
    }
}

impl Broker {
    /// Cleans compacted partitions while any is due, dirtiest first; then sleeps
    /// `log.cleaner.backoff.ms`. Every replica cleans its own copy.
    pub async fn run_log_cleaner(self: Arc<Self>) {
        if !self.config.log_cleaner_enable {
            return;
        }
        let mut shutdown = self.shutdown_signal();
        let backoff = Duration::from_millis(self.config.log_cleaner_backoff_ms.max(1));
        loop {
            let cleaned = self.clean_dirtiest().await;
            if self.is_shutting_down() {
                return;
            }
            if !cleaned && next_pass(&mut shutdown, backoff).await.is_none() {
                return;
            }
        }
    }

    /// Cleans the dirtiest due partition once; false when none is due.
    async fn clean_dirtiest(&self) -> bool {
        let now = crate::clock::now_ms();
        // (must clean: max.compaction.lag.ms passed, dirty ratio, topic, partition)
        let mut best: Option<(bool, f64, Arc<Topic>, Arc<Partition>)> = None;
        let mut max_ratio = 0f64;
        for topic in self.catalog.all() {
            let e = topic.effective;
            // The coordinators' topics are compacted whatever their config says: ones
            // created before Cairn compacted have no cleanup.policy of their own.
            if !e.compact && !topic.is_internal() {
                continue;
            }
            for p in &topic.partitions {
                let d = match p.log.dirtiness(now, e.min_compaction_lag_ms).await {
                    Ok(d) => d,
                    Err(err) => {
                        tracing::error!(topic = %topic.name, partition = p.index, error = %err, "cleaner cannot measure the partition");
                        continue;
                    }
                };
                if d.dirty_bytes == 0 && !d.deletes_due {
                    continue;
                }
                let overdue = d.first_dirty_timestamp >= 0
                    && now.saturating_sub(d.first_dirty_timestamp) > e.max_compaction_lag_ms;
                let ratio = d.ratio();
                max_ratio = max_ratio.max(ratio);
                if !overdue && !d.deletes_due && ratio * 1e6 < e.min_cleanable_ppm as f64 {
                    continue;
                }
                let better = match &best {
                    None => true,
                    Some((o, r, _, _)) => (overdue, ratio) > (*o, *r),
                };
                if better {
                    best = Some((overdue, ratio, topic.clone(), p.clone()));
                }
            }
        }
        let stats = &self.cleaner;
        stats.last_run_ms.store(now, Ordering::Relaxed);
        stats
            .max_dirty_percent
            .store((max_ratio * 100.0) as i64, Ordering::Relaxed);
        let Some((_, ratio, topic, p)) = best else {
            return false;
        };
        let e = topic.effective;
        let rules = CleanRules {
            now_ms: now,
            delete_retention_ms: match topic.is_internal() {
                // A broker that becomes a coordinator applies the records past its
                // checkpoint to its own state: every delete must still be there to apply,
                // so the coordinators' tombstones are kept (Kafka reloads the whole
                // partition instead, and removes them after delete.retention.ms). A horizon
                // past i64::MAX never comes.
                true => i64::MAX,
                false => e.delete_retention_ms,
            },
            min_compaction_lag_ms: e.min_compaction_lag_ms,
            dedupe_buffer_bytes: self.config.log_cleaner_dedupe_buffer_bytes,
        };
        let started = Instant::now();
        let result = p.log.clean(rules).await;
        stats.mark(&topic.name, p.index, result.is_err());
        match result {
            Ok(Some(r)) => {
                stats.passed(&r, rules.dedupe_buffer_bytes, started.elapsed());
                self.metrics.cleaner_bytes_read.inc_by(r.bytes_before);
                self.metrics.cleaner_bytes_written.inc_by(r.bytes_after);
                tracing::info!(topic = %topic.name, partition = p.index, dirty_ratio = ratio, from = r.from, to = r.to, bytes_before = r.bytes_before, bytes_after = r.bytes_after, removed = r.batches_removed, rewritten = r.batches_rewritten, "cleaned");
                true
            }
            Ok(None) => false,
            Err(err) => {
                tracing::error!(topic = %topic.name, partition = p.index, error = %err, "cleaning failed");
                false
            }
        }
    }
}
