//! The log cleaner's schedule: which compacted partition is cleaned next, as Kafka's
//! `LogCleanerManager.grabFilthiestCompactedLog` chooses, on `log.cleaner.threads`
//! background tasks that never clean the same partition at once.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{next_pass, Broker};
use crate::log::clean::{CleanReport, CleanRules, IoThrottle};
use crate::topics::{Partition, Topic};

/// What the cleaner threads last did, for Kafka's `LogCleaner` and `LogCleanerManager`
/// gauges (computed when scraped), and which partitions they are cleaning now.
pub struct CleanerStats {
    /// When a cleaner thread last looked for a partition to clean (ms since the epoch).
    pub last_run_ms: AtomicI64,
    /// The highest dirty ratio among compacted partitions at that look, in percent.
    pub max_dirty_percent: AtomicI64,
    /// How far past its `max.compaction.lag.ms` the most overdue partition was at that
    /// look, in seconds (Kafka's `max-compaction-delay-secs`).
    pub max_compaction_delay_secs: AtomicI64,
    /// Cleaner threads that died (panicked) since start. Kafka's `DeadThreadCount` counts
    /// threads dead now; Cairn starts a dead thread again at once, so it counts the deaths
    /// instead: anything above 0 is a bug worth a look at the broker's log.
    pub dead_threads: AtomicI64,
    /// Each thread's last pass.
    passes: Mutex<Vec<LastPass>>,
    /// Compacted partitions whose last pass failed.
    uncleanable: Mutex<HashSet<(String, i32)>>,
    /// Partitions a thread is cleaning: the other threads choose among the rest.
    in_progress: Mutex<HashSet<(String, i32)>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct LastPass {
    secs: u64,
    map_bytes: usize,
    map_limit: usize,
    bytes_read: u64,
    bytes_written: u64,
}

impl Default for CleanerStats {
    fn default() -> CleanerStats {
        CleanerStats {
            last_run_ms: AtomicI64::new(crate::clock::now_ms()),
            max_dirty_percent: AtomicI64::new(0),
            max_compaction_delay_secs: AtomicI64::new(0),
            dead_threads: AtomicI64::new(0),
            passes: Mutex::new(Vec::new()),
            uncleanable: Mutex::new(HashSet::new()),
            in_progress: Mutex::new(HashSet::new()),
        }
    }
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn percent(part: u64, whole: u64) -> i64 {
    (part * 100).checked_div(whole).unwrap_or(0) as i64
}

impl CleanerStats {
    pub fn uncleanable_count(&self) -> usize {
        locked(&self.uncleanable).len()
    }

    /// The longest of the threads' last passes, in seconds.
    pub fn max_clean_time_secs(&self) -> i64 {
        let passes = locked(&self.passes);
        passes.iter().map(|p| p.secs as i64).max().unwrap_or(0)
    }

    /// The fullest of the threads' last offset maps, in percent of its share of
    /// `log.cleaner.dedupe.buffer.size`.
    pub fn max_buffer_utilization_percent(&self) -> i64 {
        let passes = locked(&self.passes);
        let each = passes
            .iter()
            .map(|p| percent(p.map_bytes as u64, p.map_limit as u64));
        each.max().unwrap_or(0)
    }

    /// Bytes the threads' last passes wrote per byte they read, in percent.
    pub fn recopy_percent(&self) -> i64 {
        let passes = locked(&self.passes);
        let written = passes.iter().map(|p| p.bytes_written).sum();
        percent(
            written,
            passes.iter().map(|p| p.bytes_read).sum::<u64>().max(1),
        )
    }

    fn mark(&self, topic: &str, partition: i32, failed: bool) {
        let mut set = locked(&self.uncleanable);
        match failed {
            true => set.insert((topic.to_string(), partition)),
            false => set.remove(&(topic.to_string(), partition)),
        };
    }

    /// Forgets the last passes of threads past the first `threads`, which have stopped.
    fn keep_threads(&self, threads: usize) {
        locked(&self.passes).truncate(threads);
    }

    fn passed(&self, thread: usize, r: &CleanReport, map_limit: usize, took: Duration) {
        let mut passes = locked(&self.passes);
        if passes.len() <= thread {
            passes.resize(thread + 1, LastPass::default());
        }
        passes[thread] = LastPass {
            secs: took.as_secs(),
            map_bytes: r.map_bytes,
            map_limit,
            bytes_read: r.bytes_before,
            bytes_written: r.bytes_after,
        };
    }

    /// Claims a partition for one thread's pass; None when another thread has it.
    fn claim(&self, topic: &str, partition: i32) -> Option<Claim<'_>> {
        let key = (topic.to_string(), partition);
        // (The lock is released before a refused Claim could be dropped: its drop locks.)
        let free = locked(&self.in_progress).insert(key.clone());
        free.then(|| Claim { stats: self, key })
    }

    fn in_progress(&self, topic: &str, partition: i32) -> bool {
        locked(&self.in_progress).contains(&(topic.to_string(), partition))
    }
}

/// A partition a cleaner thread is cleaning, released when the pass ends.
struct Claim<'a> {
    stats: &'a CleanerStats,
    key: (String, i32),
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        locked(&self.stats.in_progress).remove(&self.key);
    }
}

impl Broker {
    /// Runs `log.cleaner.threads` cleaner threads (tasks). Each cleans compacted partitions
    /// while any is due that no other thread is cleaning, dirtiest first; then sleeps
    /// `log.cleaner.backoff.ms`. Every replica cleans its own copy.
    pub async fn run_log_cleaner(self: Arc<Self>) {
        if !self.config.log_cleaner_enable {
            return;
        }
        let io = Arc::new(IoThrottle::new(self.config.log_cleaner_io_bytes_per_sec));
        let mut set = tokio::task::JoinSet::new();
        // The threads running, by task: one that panicked is started again.
        let mut running: std::collections::HashMap<tokio::task::Id, usize> = Default::default();
        let mut shutdown = self.shutdown_signal();
        // `log.cleaner.threads` and the I/O limit are dynamic: every second the threads
        // missing are started (a thread past the count stops at its next look) and the
        // limit is read again.
        loop {
            let live = self.catalog.config();
            io.set_rate(live.log_cleaner_io_bytes_per_sec);
            let want = live.log_cleaner_threads;
            self.cleaner.keep_threads(want);
            for thread in 0..want {
                if running.values().any(|t| *t == thread) {
                    continue;
                }
                let task = set.spawn(self.clone().cleaner_thread(thread, io.clone()));
                running.insert(task.id(), thread);
            }
            tokio::select! {
                Some(ended) = set.join_next_with_id() => {
                    let id = match ended {
                        Ok((id, ())) => id,
                        Err(e) => {
                            tracing::error!(error = %e, "a log cleaner thread died; starting it again");
                            self.cleaner.dead_threads.fetch_add(1, Ordering::Relaxed);
                            e.id()
                        }
                    };
                    running.remove(&id);
                }
                more = next_pass(&mut shutdown, Duration::from_secs(1)) => {
                    if more.is_none() {
                        break;
                    }
                }
            }
        }
        while set.join_next().await.is_some() {}
    }

    async fn cleaner_thread(self: Arc<Self>, thread: usize, io: Arc<IoThrottle>) {
        let mut shutdown = self.shutdown_signal();
        loop {
            let live = self.catalog.config();
            if thread >= live.log_cleaner_threads {
                tracing::info!(
                    thread,
                    "log cleaner thread stops: log.cleaner.threads is {}",
                    live.log_cleaner_threads
                );
                return;
            }
            let cleaned = self.clean_dirtiest(thread, &io).await;
            if self.is_shutting_down() {
                return;
            }
            let backoff = Duration::from_millis(live.log_cleaner_backoff_ms.max(1));
            if !cleaned && next_pass(&mut shutdown, backoff).await.is_none() {
                return;
            }
        }
    }

    /// Cleans the dirtiest due partition no other thread is cleaning, once; false when
    /// none is due.
    async fn clean_dirtiest(&self, thread: usize, io: &IoThrottle) -> bool {
        let now = crate::clock::now_ms();
        // (must clean: max.compaction.lag.ms passed, dirty ratio, topic, partition)
        let mut best: Option<(bool, f64, Arc<Topic>, Arc<Partition>)> = None;
        let mut max_ratio = 0f64;
        // How far past max.compaction.lag.ms the most overdue partition is, in ms.
        let mut max_delay_ms = 0i64;
        for topic in self.catalog.all() {
            let e = topic.effective;
            if !topic.is_compacted() {
                continue;
            }
            for p in &topic.partitions {
                if self.cleaner.in_progress(&topic.name, p.index) {
                    continue;
                }
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
                let past_lag = match d.first_dirty_timestamp >= 0 {
                    true => now
                        .saturating_sub(d.first_dirty_timestamp)
                        .saturating_sub(e.max_compaction_lag_ms),
                    false => 0,
                };
                max_delay_ms = max_delay_ms.max(past_lag);
                let overdue = past_lag > 0;
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
        stats
            .max_compaction_delay_secs
            .store(max_delay_ms / 1000, Ordering::Relaxed);
        let Some((_, ratio, topic, p)) = best else {
            return false;
        };
        let Some(_claim) = stats.claim(&topic.name, p.index) else {
            // Another thread took it since: look again.
            return true;
        };
        let e = topic.effective;
        let live = self.catalog.config();
        let rules = CleanRules {
            now_ms: now,
            // The coordinators' topics too: a coordinator rebuilds a partition's state
            // from its whole log when it comes to lead it, so a removed tombstone's key is
            // simply absent (src/replication/coordinated.rs).
            delete_retention_ms: e.delete_retention_ms,
            min_compaction_lag_ms: e.min_compaction_lag_ms,
            // Kafka shares the dedupe buffer out among the threads.
            dedupe_buffer_bytes: live.log_cleaner_dedupe_buffer_bytes
                / live.log_cleaner_threads.max(1),
        };
        tracing::info!(topic = %topic.name, partition = p.index, dirty_ratio = ratio, "cleaning");
        let started = Instant::now();
        let result = p.log.clean(rules, io).await;
        stats.mark(&topic.name, p.index, result.is_err());
        match result {
            Ok(Some(r)) => {
                stats.passed(thread, &r, rules.dedupe_buffer_bytes, started.elapsed());
                self.metrics.cleaner_bytes_read.inc_by(r.bytes_before);
                self.metrics.cleaner_bytes_written.inc_by(r.bytes_after);
                tracing::info!(topic = %topic.name, partition = p.index, dirty_ratio = ratio, from = r.from, to = r.to, bytes_before = r.bytes_before, bytes_after = r.bytes_after, removed = r.batches_removed, rewritten = r.batches_rewritten, "cleaned");
                true
            }
            Ok(None) => false,
            // At shutdown the runtime cancels a write not yet started: nothing was changed
            // (a pass commits in one atomic write), and the next start cleans again.
            Err(err) if self.is_shutting_down() => {
                tracing::info!(topic = %topic.name, partition = p.index, error = %err, "cleaning stopped by the shutdown");
                false
            }
            Err(err) => {
                tracing::error!(topic = %topic.name, partition = p.index, error = %err, "cleaning failed");
                false
            }
        }
    }
}
