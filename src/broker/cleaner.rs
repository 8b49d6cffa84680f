//! The log cleaner's schedule: which compacted partition is cleaned next, as Kafka's
//! `LogCleanerManager.grabFilthiestCompactedLog` chooses, on one background task.

use std::sync::Arc;
use std::time::Duration;

use super::{next_pass, Broker};
use crate::log::clean::CleanRules;
use crate::topics::{Partition, Topic};

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
        match p.log.clean(rules).await {
            Ok(Some(r)) => {
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
