//! Log compaction (`cleanup.policy=compact`), Kafka's log cleaner on the batch store.
//!
//! A pass over a partition works as Kafka's `Cleaner.doClean` does:
//! 1. The dirty section runs from the first offset not yet cleaned to the cleanable end:
//!    the last stable offset, the start of the active segment and the first batch younger
//!    than `min.compaction.lag.ms`, whichever comes first. An offset map of the latest
//!    offset of each key is built over it, bounded by `log.cleaner.dedupe.buffer.size`
//!    (a full map ends the pass's dirty section early; the next pass goes on from there).
//! 2. Every batch from the log start to the end of the mapped section is filtered: a record
//!    stays when it holds its key's latest offset, and a record without a key goes. A batch
//!    keeps its base offset and offset range, so the offsets of the records kept never
//!    change; a batch left with no record goes entirely.
//! 3. Tombstones (null values) are kept while they are the latest of their key. The first
//!    pass that reaches one stamps its batch with a delete horizon of now +
//!    `delete.retention.ms` (KIP-534); a pass after the horizon removes it.
//!
//! The rewritten and removed batches, with the new first dirty offset, are written in one
//! atomic storage write, so a crash leaves the log as it was before the pass or after it,
//! never an offset with two values. Reading and filtering hold no lock; only that write
//! takes the partition's append lock, briefly, and is dropped if the log was cut meanwhile.
//!
//! The last batch of each producer is never removed: left with no record, it stays as an
//! empty batch, as Kafka keeps it, so the producer's sequence and epoch stay in the log.
//!
//! Transactions, as Kafka's `CleanedTransactionMetadata` walks them (the cleanable end is
//! never past the LSO, so every transaction met is finished):
//! - a batch of an aborted transaction (one in the aborted-transactions index) goes, and
//!   its records never enter the offset map, so a committed value never loses to it;
//! - a committed transaction's records are cleaned as any others;
//! - a marker stays while any batch of its transaction is left. The first pass that finds
//!   none stamps it with a delete horizon, as a tombstone is, and a pass after that removes
//!   it. (Cairn keeps producer state apart from the log, so no marker is kept for fencing.)

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::batch::{self, BatchHeader, ControlType};
use super::{read_stored, PartitionLog, TAIL_CACHE_TOTAL};
use crate::error::{Error, Result};
use crate::storage::{AbortedTxn, BatchMeta};

/// Bytes an offset-map entry costs besides its key, as the dedupe buffer counts it.
const ENTRY_OVERHEAD: usize = 48;
/// Bytes read from storage at a time while mapping and filtering.
const READ_CHUNK: usize = 1 << 20;

/// The latest offset of each key in the dirty section.
pub struct OffsetMap {
    latest: HashMap<Vec<u8>, i64>,
    bytes: usize,
    limit: usize,
}

impl OffsetMap {
    pub fn new(limit_bytes: usize) -> OffsetMap {
        OffsetMap {
            latest: HashMap::new(),
            bytes: 0,
            limit: limit_bytes,
        }
    }

    /// Adds the keyed records of one batch. Returns false, adding nothing, when the new
    /// keys would pass the limit (and the map is not empty: one batch always fits).
    pub fn add(&mut self, batch: &[u8], h: &BatchHeader) -> Result<bool> {
        let plain = batch::plain_records(batch, h)
            .ok_or_else(|| Error::CorruptMessage("record batch does not decompress".into()))?;
        let records = batch::parse_records(&plain, h.record_count)?;
        let grow: usize = records
            .iter()
            .filter_map(|r| r.key)
            .filter(|k| !self.latest.contains_key(*k))
            .map(|k| k.len() + ENTRY_OVERHEAD)
            .sum();
        if grow > 0 && !self.latest.is_empty() && self.bytes + grow > self.limit {
            return Ok(false);
        }
        self.bytes += grow;
        for r in &records {
            if let Some(k) = r.key {
                let offset = h.base_offset + r.offset_delta as i64;
                self.latest.insert(k.to_vec(), offset);
            }
        }
        Ok(true)
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

/// What cleaning did to one batch.
#[derive(Debug)]
pub enum Cleaned {
    Unchanged,
    Removed,
    Rewritten(Bytes),
}

/// Filters one data batch against the offset map (see the module docs).
pub fn clean_batch(
    batch: &[u8],
    h: &BatchHeader,
    map: &OffsetMap,
    now_ms: i64,
    delete_retention_ms: i64,
) -> Result<Cleaned> {
    let plain = batch::plain_records(batch, h)
        .ok_or_else(|| Error::CorruptMessage("record batch does not decompress".into()))?;
    let records = batch::parse_records(&plain, h.record_count)?;
    let horizon_passed = h.delete_horizon().is_some_and(|t| now_ms >= t);
    let kept: Vec<_> = records
        .iter()
        .filter(|r| {
            let Some(key) = r.key else { return false };
            let offset = h.base_offset + r.offset_delta as i64;
            let latest = map.latest.get(key).is_none_or(|l| offset >= *l);
            latest && !(r.is_tombstone && horizon_passed)
        })
        .copied()
        .collect();
    if kept.is_empty() {
        return Ok(Cleaned::Removed);
    }
    // A horizon past i64::MAX (`delete.retention.ms` of Long.MAX_VALUE) never comes: the
    // tombstone stays, unstamped.
    let stamp = (h.delete_horizon().is_none() && kept.iter().any(|r| r.is_tombstone))
        .then(|| now_ms.checked_add(delete_retention_ms))
        .flatten();
    if kept.len() == records.len() && stamp.is_none() {
        return Ok(Cleaned::Unchanged);
    }
    Ok(Cleaned::Rewritten(batch::rebuild(batch, h, &kept, stamp)?))
}

/// What cleaning does to a transaction marker, `done` when no batch of its transaction is
/// left: it stays until then, is stamped with a delete horizon, and goes after it.
pub fn clean_marker(
    batch: &[u8],
    h: &BatchHeader,
    done: bool,
    now_ms: i64,
    delete_retention_ms: i64,
) -> Result<Cleaned> {
    match (done, h.delete_horizon()) {
        (false, _) => Ok(Cleaned::Unchanged),
        (true, Some(t)) if now_ms >= t => Ok(Cleaned::Removed),
        (true, Some(_)) => Ok(Cleaned::Unchanged),
        (true, None) => {
            // As for tombstones, a horizon past i64::MAX never comes.
            let Some(stamp) = now_ms.checked_add(delete_retention_ms) else {
                return Ok(Cleaned::Unchanged);
            };
            let plain = batch::plain_records(batch, h)
                .ok_or_else(|| Error::CorruptMessage("marker does not decompress".into()))?;
            let records = batch::parse_records(&plain, h.record_count)?;
            Ok(Cleaned::Rewritten(batch::rebuild(
                batch,
                h,
                &records,
                Some(stamp),
            )?))
        }
    }
}

/// The transactions a pass meets as it walks batches in offset order (Kafka's
/// `CleanedTransactionMetadata`): which data batches were aborted, and which markers close
/// a transaction none of whose batches is left.
struct TxnWalk {
    /// Aborted transactions not reached yet, by first offset.
    pending: std::collections::VecDeque<AbortedTxn>,
    /// Aborted transactions reached whose marker is not: producer -> a batch of it was met.
    aborting: HashMap<i64, bool>,
    /// Producers with a batch of a committed transaction met and its marker not reached.
    committing: HashSet<i64>,
}

impl TxnWalk {
    /// A walk from offset `from`, over the partition's aborted-transactions index.
    fn new(index: &[AbortedTxn], from: i64) -> TxnWalk {
        let mut pending: Vec<AbortedTxn> = index
            .iter()
            .filter(|t| t.last_offset >= from)
            .copied()
            .collect();
        pending.sort_by_key(|t| t.first_offset);
        TxnWalk {
            pending: pending.into(),
            aborting: HashMap::new(),
            committing: HashSet::new(),
        }
    }

    fn reach(&mut self, offset: i64) {
        while let Some(t) = self.pending.front().filter(|t| t.first_offset <= offset) {
            self.aborting.insert(t.producer_id, false);
            self.pending.pop_front();
        }
    }

    /// A data batch: true when it belongs to an aborted transaction.
    fn on_batch(&mut self, h: &BatchHeader) -> bool {
        self.reach(h.last_offset());
        if !h.is_transactional() {
            return false;
        }
        match self.aborting.get_mut(&h.producer_id) {
            Some(met) => {
                *met = true;
                true
            }
            None => {
                self.committing.insert(h.producer_id);
                false
            }
        }
    }

    /// A control batch: true when no batch of the transaction it ends was met.
    fn on_marker(&mut self, batch: &[u8], h: &BatchHeader) -> bool {
        self.reach(h.last_offset());
        if h.record_count == 0 {
            return true;
        }
        match batch::control_type(batch, h) {
            Some(ControlType::Abort) => !self.aborting.remove(&h.producer_id).unwrap_or(false),
            Some(ControlType::Commit) => !self.committing.remove(&h.producer_id),
            None => false,
        }
    }
}

/// How a pass is to clean a partition: the topic's settings at the time.
#[derive(Debug, Clone, Copy)]
pub struct CleanRules {
    pub now_ms: i64,
    pub delete_retention_ms: i64,
    pub min_compaction_lag_ms: i64,
    pub dedupe_buffer_bytes: usize,
}

/// Kafka's `Throttler` for `log.cleaner.io.max.bytes.per.second`: the bytes every cleaner
/// pass reads and writes, summed over all cleaner threads, are measured over periods of
/// `CHECK_INTERVAL`; a period that went faster than the rate sleeps, holding the others
/// back too, until its bytes took as long as the rate allows.
pub struct IoThrottle {
    /// The rate (an `f64`'s bits): a running broker may change it.
    bytes_per_sec: std::sync::atomic::AtomicU64,
    period: tokio::sync::Mutex<(tokio::time::Instant, u64)>,
}

impl IoThrottle {
    const CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(300);

    pub fn new(bytes_per_sec: f64) -> IoThrottle {
        IoThrottle {
            bytes_per_sec: std::sync::atomic::AtomicU64::new(bytes_per_sec.to_bits()),
            period: tokio::sync::Mutex::new((tokio::time::Instant::now(), 0)),
        }
    }

    /// Holds the passes to `bytes_per_sec` from now on.
    pub fn set_rate(&self, bytes_per_sec: f64) {
        self.bytes_per_sec.store(
            bytes_per_sec.to_bits(),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    fn rate(&self) -> f64 {
        f64::from_bits(
            self.bytes_per_sec
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Counts `bytes` read or written, and sleeps when the period's rate is over the limit.
    pub async fn observe(&self, bytes: u64) {
        let mut period = self.period.lock().await;
        let (start, seen) = &mut *period;
        *seen += bytes;
        let elapsed = start.elapsed();
        if elapsed <= Self::CHECK_INTERVAL || *seen == 0 {
            return;
        }
        let allowed = std::time::Duration::from_secs_f64(*seen as f64 / self.rate());
        if let Some(wait) = allowed.checked_sub(elapsed) {
            tokio::time::sleep(wait).await;
        }
        *period = (tokio::time::Instant::now(), 0);
    }
}

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// The dirty section cleaned: [first dirty, end).
    pub from: i64,
    pub to: i64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub batches_removed: usize,
    pub batches_rewritten: usize,
    /// The offset map's bytes (its limit is the rules' `dedupe_buffer_bytes`).
    pub map_bytes: usize,
}

/// The dirty and clean bytes of a partition, to choose the dirtiest one.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Dirtiness {
    pub dirty_bytes: u64,
    pub total_bytes: u64,
    /// The oldest max timestamp in the dirty section (-1: none).
    pub first_dirty_timestamp: i64,
    /// Tombstones or markers whose delete horizon has passed wait for a pass.
    pub deletes_due: bool,
}

impl Dirtiness {
    pub fn ratio(&self) -> f64 {
        match self.total_bytes {
            0 => 0.0,
            t => self.dirty_bytes as f64 / t as f64,
        }
    }
}

impl PartitionLog {
    /// Sets the active segment's limits (the topic's `segment.bytes` and `segment.ms`):
    /// the next append past either starts a new active segment.
    pub fn set_segment_limits(&self, bytes: u64, ms: i64) {
        let mut s = self.write_state();
        s.segment_limits = (bytes, ms);
    }

    /// The first offset not yet cleaned, and where cleaning must stop now: the LSO, the
    /// active segment's start and the first batch younger than `min_lag_ms`.
    async fn cleanable(&self, now_ms: i64, min_lag_ms: i64) -> Result<(i64, i64)> {
        let (start, first_dirty, stable, active) = {
            let s = self.read_state();
            (
                s.log_start,
                s.cleaned_to.max(s.log_start),
                s.last_stable(),
                s.active.start,
            )
        };
        let mut end = stable.min(active);
        if min_lag_ms > 0 {
            let cutoff = now_ms.saturating_sub(min_lag_ms);
            let young = self
                .scan(first_dirty, None, move |young: &mut Option<i64>, m| {
                    if m.max_timestamp > cutoff {
                        *young = Some(m.base_offset);
                        return false;
                    }
                    true
                })
                .await?;
            if let Some(y) = young {
                end = end.min(y);
            }
        }
        Ok((first_dirty.max(start), end))
    }

    /// The partition's dirty bytes against its total, as the cleaner chooses by them.
    pub async fn dirtiness(&self, now_ms: i64, min_lag_ms: i64) -> Result<Dirtiness> {
        let (first_dirty, end) = self.cleanable(now_ms, min_lag_ms).await?;
        let total_bytes = self.size_bytes();
        let deletes_due = self.deletes_due(now_ms, first_dirty);
        if end <= first_dirty {
            return Ok(Dirtiness {
                dirty_bytes: 0,
                total_bytes,
                first_dirty_timestamp: -1,
                deletes_due,
            });
        }
        let (dirty_bytes, first_dirty_timestamp) = self
            .scan(first_dirty, (0u64, -1i64), move |(bytes, ts), m| {
                if m.last_offset >= end {
                    return false;
                }
                *bytes += m.size as u64;
                if *ts < 0 {
                    *ts = m.max_timestamp;
                }
                true
            })
            .await?;
        Ok(Dirtiness {
            dirty_bytes,
            total_bytes,
            first_dirty_timestamp,
            deletes_due,
        })
    }

    /// Whether a stamped tombstone or marker below `first_dirty` may go now.
    fn deletes_due(&self, now_ms: i64, first_dirty: i64) -> bool {
        let s = self.read_state();
        first_dirty > s.log_start && s.earliest_delete_horizon.is_some_and(|t| now_ms >= t)
    }

    /// Cleans the partition once (see the module docs). None when there was nothing to
    /// clean or the log changed under the pass (it is tried again later).
    pub async fn clean(&self, rules: CleanRules, io: &IoThrottle) -> Result<Option<CleanReport>> {
        let (first_dirty, end) = self
            .cleanable(rules.now_ms, rules.min_compaction_lag_ms)
            .await?;
        let deletes_due = self.deletes_due(rules.now_ms, first_dirty);
        if end <= first_dirty && !deletes_due {
            return Ok(None);
        }
        let (generation, aborted) = {
            let s = self.read_state();
            (s.generation, s.aborted.clone())
        };
        // 1. The offset map over [first_dirty, end), whole batches only, aborted ones left
        //    out.
        let mut map = OffsetMap::new(rules.dedupe_buffer_bytes);
        let mut walk = TxnWalk::new(&aborted, first_dirty);
        let mut mapped_to = first_dirty;
        'map: while mapped_to < end {
            // From the store, not the tail cache: the cleaner must see what storage holds.
            let chunk = read_stored(self.store(), self.id, mapped_to, READ_CHUNK).await?;
            io.observe(chunk.iter().map(Bytes::len).sum::<usize>() as u64)
                .await;
            let mut any = false;
            for (h, bytes) in batches(&chunk) {
                if h.last_offset() < mapped_to {
                    continue;
                }
                if h.last_offset() >= end {
                    break 'map;
                }
                any = true;
                if h.is_control() {
                    walk.on_marker(&bytes, &h);
                } else if !walk.on_batch(&h) && !map.add(&bytes, &h)? {
                    break 'map;
                }
                mapped_to = h.last_offset() + 1;
            }
            if !any {
                break;
            }
        }
        if mapped_to <= first_dirty && !deletes_due {
            return Ok(None);
        }
        // 2. Filter every batch below the mapped end.
        let last_batches: HashSet<i64> = {
            let producers = self.appends.lock().await;
            producers
                .values()
                .filter_map(|p| p.batches.back().map(|b| b.base_offset))
                .collect()
        };
        let mut report = CleanReport {
            from: first_dirty,
            to: mapped_to,
            map_bytes: map.bytes,
            ..CleanReport::default()
        };
        let mut rewritten: Vec<(BatchMeta, Bytes)> = Vec::new();
        let mut removed: Vec<BatchMeta> = Vec::new();
        // The earliest delete horizon left on a batch after this pass.
        let mut horizon: Option<i64> = None;
        let mut note_horizon = |h: Option<i64>| {
            if let Some(t) = h {
                horizon = Some(horizon.map_or(t, |m: i64| m.min(t)));
            }
        };
        let mut at = self.read_state().log_start;
        let mut walk = TxnWalk::new(&aborted, at);
        'filter: while at < mapped_to {
            let chunk = read_stored(self.store(), self.id, at, READ_CHUNK).await?;
            io.observe(chunk.iter().map(Bytes::len).sum::<usize>() as u64)
                .await;
            let mut any = false;
            for (h, bytes) in batches(&chunk) {
                if h.last_offset() < at {
                    continue;
                }
                if h.base_offset >= mapped_to {
                    break 'filter;
                }
                any = true;
                at = h.last_offset() + 1;
                let meta = BatchMeta {
                    base_offset: h.base_offset,
                    last_offset: h.last_offset(),
                    max_timestamp: h.max_timestamp,
                    size: h.size as u32,
                };
                report.bytes_before += h.size as u64;
                let (now, retention) = (rules.now_ms, rules.delete_retention_ms);
                let mut cleaned = if h.is_control() {
                    let done = walk.on_marker(&bytes, &h);
                    clean_marker(&bytes, &h, done, now, retention)?
                } else if walk.on_batch(&h) {
                    Cleaned::Removed
                } else {
                    clean_batch(&bytes, &h, &map, now, retention)?
                };
                if matches!(cleaned, Cleaned::Removed) && last_batches.contains(&h.base_offset) {
                    // A producer's last batch stays, emptied, for its sequence and epoch.
                    cleaned = match h.record_count {
                        0 => Cleaned::Unchanged,
                        _ => Cleaned::Rewritten(batch::rebuild(&bytes, &h, &[], None)?),
                    };
                }
                match cleaned {
                    Cleaned::Unchanged => {
                        note_horizon(h.delete_horizon());
                        report.bytes_after += h.size as u64
                    }
                    Cleaned::Removed => removed.push(meta),
                    Cleaned::Rewritten(b) => {
                        note_horizon(BatchHeader::parse(&b)?.delete_horizon());
                        report.bytes_after += b.len() as u64;
                        rewritten.push((
                            BatchMeta {
                                size: b.len() as u32,
                                ..meta
                            },
                            b,
                        ));
                    }
                }
            }
            if !any {
                break;
            }
        }
        report.batches_removed = removed.len();
        report.batches_rewritten = rewritten.len();
        // 3. One atomic write, unless the log was cut meanwhile.
        io.observe(rewritten.iter().map(|(m, _)| m.size as u64).sum())
            .await;
        let _guard = self.appends.lock().await;
        {
            let s = self.read_state();
            if s.generation != generation {
                return Ok(None);
            }
        }
        let log_start = self.read_state().log_start;
        removed.retain(|m| m.last_offset >= log_start);
        rewritten.retain(|(m, _)| m.last_offset >= log_start);
        let store = self.store().clone();
        let id = self.id;
        let removed_bases: Vec<i64> = removed.iter().map(|m| m.base_offset).collect();
        // A removed abort marker leaves the aborted index too: read_committed consumers
        // would otherwise skip the producer's later transactions, waiting for it.
        let unindexed: Vec<i64> = aborted
            .iter()
            .map(|t| t.last_offset)
            .filter(|m| removed_bases.binary_search(m).is_ok())
            .collect();
        let (written, dropped) = (rewritten.clone(), unindexed.clone());
        let size = tokio::task::spawn_blocking(move || {
            store.replace_batches(id, &written, &removed_bases, &dropped, mapped_to)?;
            store.size_bytes(id)
        })
        .await
        .map_err(|e| Error::Storage(format!("clean task failed: {e}")))??;
        // The tail cache holds batches as appended: drop those the pass changed.
        let changed: HashSet<i64> = removed
            .iter()
            .map(|m| m.base_offset)
            .chain(rewritten.iter().map(|(m, _)| m.base_offset))
            .collect();
        let mut s = self.write_state();
        s.size_bytes = size;
        s.aborted
            .retain(|t| unindexed.binary_search(&t.last_offset).is_err());
        s.cleaned_to = mapped_to;
        s.earliest_delete_horizon = horizon;
        let mut freed = 0usize;
        s.tail.retain(|c| {
            let keep = !changed.contains(&c.base);
            if !keep {
                freed += c.bytes.len();
            }
            keep
        });
        s.tail_bytes -= freed;
        TAIL_CACHE_TOTAL.fetch_sub(freed, Ordering::Relaxed);
        Ok(Some(report))
    }
}

/// The batches of a read (in the store's pieces), each with its header.
fn batches(pieces: &[Bytes]) -> impl Iterator<Item = (BatchHeader, Bytes)> + '_ {
    pieces.iter().flat_map(|piece| {
        let mut at = 0usize;
        std::iter::from_fn(move || {
            let h = BatchHeader::parse(&piece[at..]).ok()?;
            let b = piece.slice(at..at + h.size);
            at += h.size;
            Some((h, b))
        })
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    use super::*;
    use crate::log::{AppendOptions, ReadUpTo};
    use crate::storage::memory::MemoryStore;
    use crate::storage::LogStore;

    /// A batch of (key, value) records at offsets from `base`, timestamps 1000 + offset,
    /// built by kafka-protocol's encoder (the reference, not ours).
    fn encode(base: i64, kvs: &[(Option<&str>, Option<&str>)], compression: Compression) -> Bytes {
        encode_by(None, base, kvs, compression)
    }

    /// As `encode`, by idempotent producer `(id, first sequence)` when given.
    fn encode_by(
        producer: Option<(i64, i32)>,
        base: i64,
        kvs: &[(Option<&str>, Option<&str>)],
        compression: Compression,
    ) -> Bytes {
        encode_with(producer, false, base, kvs, compression)
    }

    /// A transactional batch of producer `id` from sequence `seq`.
    fn encode_txn(id: i64, seq: i32, kvs: &[(Option<&str>, Option<&str>)]) -> Bytes {
        encode_with(Some((id, seq)), true, 0, kvs, Compression::None)
    }

    fn encode_with(
        producer: Option<(i64, i32)>,
        transactional: bool,
        base: i64,
        kvs: &[(Option<&str>, Option<&str>)],
        compression: Compression,
    ) -> Bytes {
        let (producer_id, producer_epoch, seq0) = match producer {
            Some((id, seq)) => (id, 0, seq),
            None => (-1, -1, base as i32),
        };
        let records: Vec<Record> = kvs
            .iter()
            .enumerate()
            .map(|(i, (k, v))| Record {
                transactional,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id,
                producer_epoch,
                timestamp_type: TimestampType::Creation,
                offset: base + i as i64,
                // the encoder keeps records in one batch while offset - sequence is constant
                sequence: seq0 + i as i32,
                timestamp: 1000 + base + i as i64,
                key: k.map(|k| Bytes::copy_from_slice(k.as_bytes())),
                value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        buf.freeze()
    }

    /// (offset, key, value, timestamp) of every data record, decoded by kafka-protocol,
    /// which also checks each batch's CRC.
    fn decode(bytes: &Bytes) -> Vec<(i64, String, Option<String>, i64)> {
        let mut buf = bytes.clone();
        let mut out = Vec::new();
        while !buf.is_empty() {
            let set = RecordBatchDecoder::decode(&mut buf).unwrap();
            for r in set.records.into_iter().filter(|r| !r.control) {
                let s = |b: Bytes| String::from_utf8(b.to_vec()).unwrap();
                out.push((r.offset, s(r.key.unwrap()), r.value.map(s), r.timestamp));
            }
        }
        out
    }

    fn map_of(batches: &[&Bytes]) -> OffsetMap {
        let mut map = OffsetMap::new(1 << 20);
        for b in batches {
            let h = BatchHeader::parse(b).unwrap();
            assert!(map.add(b, &h).unwrap());
        }
        map
    }

    #[test]
    fn a_batch_keeps_the_latest_record_of_each_key_at_its_offset_in_every_codec() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let old = encode(
                10,
                &[
                    (Some("a"), Some("a1")),
                    (Some("b"), Some("b1")),
                    (Some("c"), Some("c1")),
                ],
                compression,
            );
            let new = encode(13, &[(Some("b"), Some("b2"))], compression);
            let map = map_of(&[&old, &new]);
            let h = BatchHeader::parse(&old).unwrap();
            let Cleaned::Rewritten(b) = clean_batch(&old, &h, &map, 5000, 1000).unwrap() else {
                panic!("{compression:?}: expected a rewrite");
            };
            let nh = BatchHeader::parse(&b).unwrap();
            assert_eq!(nh.base_offset, 10, "{compression:?}");
            assert_eq!(nh.last_offset(), 12, "{compression:?}: the range is kept");
            assert_eq!(nh.compression(), h.compression(), "{compression:?}");
            assert_eq!(
                decode(&b),
                vec![
                    (10, "a".into(), Some("a1".into()), 1010),
                    (12, "c".into(), Some("c1".into()), 1012)
                ],
                "{compression:?}"
            );
            // The newest batch holds only latest records: left as it is.
            let h = BatchHeader::parse(&new).unwrap();
            assert!(matches!(
                clean_batch(&new, &h, &map, 5000, 1000).unwrap(),
                Cleaned::Unchanged
            ));
        }
    }

    #[test]
    fn a_batch_of_superseded_and_keyless_records_goes() {
        let old = encode(
            0,
            &[(Some("a"), Some("1")), (None, Some("x"))],
            Compression::None,
        );
        let new = encode(2, &[(Some("a"), Some("2"))], Compression::None);
        let map = map_of(&[&old, &new]);
        let h = BatchHeader::parse(&old).unwrap();
        assert!(matches!(
            clean_batch(&old, &h, &map, 0, 0).unwrap(),
            Cleaned::Removed
        ));
    }

    #[test]
    fn a_tombstone_gets_a_delete_horizon_then_goes_after_it() {
        let b = encode(
            0,
            &[(Some("a"), None), (Some("b"), Some("b1"))],
            Compression::Zstd,
        );
        let map = map_of(&[&b]);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.delete_horizon(), None);
        let Cleaned::Rewritten(stamped) = clean_batch(&b, &h, &map, 50_000, 7_000).unwrap() else {
            panic!("the first pass stamps the horizon");
        };
        let sh = BatchHeader::parse(&stamped).unwrap();
        assert_eq!(sh.delete_horizon(), Some(57_000));
        // Timestamps are those the producer gave, horizon or not.
        assert_eq!(decode(&stamped), decode(&b));
        // Before the horizon the tombstone stays; from it on, it goes.
        assert!(matches!(
            clean_batch(&stamped, &sh, &map, 56_999, 7_000).unwrap(),
            Cleaned::Unchanged
        ));
        let Cleaned::Rewritten(after) = clean_batch(&stamped, &sh, &map, 57_000, 7_000).unwrap()
        else {
            panic!("the tombstone goes after the horizon");
        };
        assert_eq!(
            decode(&after),
            vec![(1, "b".into(), Some("b1".into()), 1001)]
        );
    }

    #[test]
    fn a_full_offset_map_refuses_more_keys_but_always_takes_one_batch() {
        let a = encode(0, &[(Some("aaaa"), Some("1"))], Compression::None);
        let b = encode(1, &[(Some("bbbb"), Some("1"))], Compression::None);
        let mut map = OffsetMap::new(10);
        assert!(map.add(&a, &BatchHeader::parse(&a).unwrap()).unwrap());
        assert!(!map.add(&b, &BatchHeader::parse(&b).unwrap()).unwrap());
        // A key already mapped costs nothing more.
        assert!(map.add(&a, &BatchHeader::parse(&a).unwrap()).unwrap());
        assert_eq!(map.len(), 1);
    }

    fn opts() -> AppendOptions {
        AppendOptions {
            max_message_bytes: 1 << 20,
            durable: false,
            log_append_time_ms: None,
        }
    }

    fn rules(now_ms: i64) -> CleanRules {
        CleanRules {
            now_ms,
            delete_retention_ms: 0,
            min_compaction_lag_ms: 0,
            dedupe_buffer_bytes: 1 << 20,
        }
    }

    fn unthrottled() -> IoThrottle {
        IoThrottle::new(f64::MAX)
    }

    /// One unthrottled pass with `rules(now_ms)`.
    async fn clean(log: &PartitionLog, now_ms: i64) -> Option<CleanReport> {
        log.clean(rules(now_ms), &unthrottled()).await.unwrap()
    }

    /// The throttle holds a pass back until its bytes took as long as the rate allows:
    /// 10000 bytes at 1000 bytes/s take about 10 s of (paused, so exact) tokio time where
    /// they would take 1 s unthrottled.
    #[tokio::test(start_paused = true)]
    async fn io_throttle_holds_the_rate() {
        async fn feed(t: &IoThrottle) -> std::time::Duration {
            let start = tokio::time::Instant::now();
            for _ in 0..100 {
                t.observe(100).await;
                tokio::time::advance(std::time::Duration::from_millis(10)).await;
            }
            start.elapsed()
        }
        // Periods close past 300 ms: the bytes of the last, unclosed one are not slept for.
        let took = feed(&IoThrottle::new(1000.0)).await;
        assert!(took >= std::time::Duration::from_secs(9), "{took:?}");
        assert!(took <= std::time::Duration::from_secs(10), "{took:?}");
        let took = feed(&unthrottled()).await;
        assert_eq!(took, std::time::Duration::from_secs(1));
    }

    async fn all(log: &PartitionLog) -> Vec<(i64, String, Option<String>, i64)> {
        let r = log
            .read(0, 1 << 20, true, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        decode(&r.records)
    }

    /// (offset, key, value) of every data record.
    async fn values(log: &PartitionLog) -> Vec<(i64, String, Option<String>)> {
        all(log)
            .await
            .into_iter()
            .map(|(o, k, v, _)| (o, k, v))
            .collect()
    }

    #[tokio::test]
    async fn a_pass_leaves_the_latest_value_per_key_and_never_the_active_segment() {
        let store = Arc::new(MemoryStore::default());
        let log = PartitionLog::open(1, store.clone() as Arc<dyn LogStore>, 0).unwrap();
        // Every batch starts a new active segment: only the newest is active.
        log.set_segment_limits(1, i64::MAX);
        for round in 0..3 {
            let kvs: Vec<(Option<String>, Option<String>)> = (0..4)
                .map(|k| (Some(format!("k{k}")), Some(format!("v{round}"))))
                .collect();
            let kvs: Vec<(Option<&str>, Option<&str>)> = kvs
                .iter()
                .map(|(k, v)| (k.as_deref(), v.as_deref()))
                .collect();
            log.append(&encode(0, &kvs, Compression::None), opts())
                .await
                .unwrap();
        }
        // k0 is deleted in the active segment: its tombstone is not cleaned yet.
        log.append(&encode(0, &[(Some("k0"), None)], Compression::None), opts())
            .await
            .unwrap();
        let before = log.size_bytes();
        let r = clean(&log, 10_000).await.expect("a pass");
        assert_eq!((r.from, r.to), (0, 12));
        assert_eq!(r.batches_removed, 2);
        assert!(log.size_bytes() < before);
        let got = values(&log).await;
        let v = |s: &str| Some(s.to_string());
        assert_eq!(
            got,
            vec![
                (8, "k0".into(), v("v2")),
                (9, "k1".into(), v("v2")),
                (10, "k2".into(), v("v2")),
                (11, "k3".into(), v("v2")),
                (12, "k0".into(), None),
            ]
        );
        // Nothing dirty is left below the active segment.
        assert!(clean(&log, 10_000).await.is_none());
        // A read from a removed offset starts at the next one kept.
        let r = log
            .read(3, 1 << 20, true, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        assert_eq!(decode(&r.records)[0].0, 8);
        // The pass survives a reopen, with where it stopped.
        drop(log);
        let log = PartitionLog::open(1, store.clone() as Arc<dyn LogStore>, 0).unwrap();
        assert_eq!(all(&log).await.len(), 5);
        assert_eq!(store.cleaned_to(1).unwrap(), Some(12));
        // The newest batch is still the active segment after the reopen, as Kafka's last
        // segment file is: a pass (one may run, to look for tombstones due) stops below it.
        if let Some(r) = clean(&log, 10_000).await {
            assert!(r.to <= 12, "the pass cleaned the active segment: {r:?}");
        }
        assert_eq!(values(&log).await, got);
        // Once the tombstone is behind the active segment, it is stamped, then removed.
        log.set_segment_limits(1, i64::MAX);
        log.append(
            &encode(0, &[(Some("k9"), Some("x"))], Compression::None),
            opts(),
        )
        .await
        .unwrap();
        log.append(
            &encode(0, &[(Some("k9"), Some("y"))], Compression::None),
            opts(),
        )
        .await
        .unwrap();
        clean(&log, 20_000).await.expect("a pass");
        let got = all(&log).await;
        assert!(got.iter().any(|r| r.0 == 12 && r.2.is_none()), "{got:?}");
        assert!(got.iter().all(|r| r.1 != "k0" || r.0 == 12), "{got:?}");
        log.append(
            &encode(0, &[(Some("k9"), Some("z"))], Compression::None),
            opts(),
        )
        .await
        .unwrap();
        clean(&log, 20_001).await.expect("a pass");
        let keys: Vec<(i64, String)> = all(&log).await.into_iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(
            keys,
            vec![
                (9, "k1".into()),
                (10, "k2".into()),
                (11, "k3".into()),
                // Latest of its key when the pass ran; 15 is in the active segment.
                (14, "k9".into()),
                (15, "k9".into())
            ]
        );
    }
    #[tokio::test]
    async fn a_producers_last_batch_stays_empty_rather_than_going() {
        let store = Arc::new(MemoryStore::default());
        let log = PartitionLog::open(1, store.clone() as Arc<dyn LogStore>, 0).unwrap();
        log.set_segment_limits(1, i64::MAX);
        let idem = |seq, kvs: &[(Option<&str>, Option<&str>)]| {
            encode_by(Some((7, seq)), 0, kvs, Compression::None)
        };
        log.append(&idem(0, &[(Some("a"), Some("1"))]), opts())
            .await
            .unwrap();
        log.append(&idem(1, &[(Some("b"), Some("1"))]), opts())
            .await
            .unwrap();
        for v in ["2", "3"] {
            let b = encode(
                0,
                &[(Some("a"), Some(v)), (Some("b"), Some(v))],
                Compression::None,
            );
            log.append(&b, opts()).await.unwrap();
        }
        let r = clean(&log, 1).await.expect("a pass");
        assert_eq!((r.batches_removed, r.batches_rewritten), (1, 1));
        let read = log
            .read(0, 1 << 20, true, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        let headers: Vec<(i64, i64, i32)> = batch::headers(&read.records)
            .map(|h| (h.base_offset, h.producer_id, h.record_count))
            .collect();
        // Producer 7's first batch went; its last (offset 1) stays, with no record.
        assert_eq!(headers, vec![(1, 7, 0), (2, -1, 2), (4, -1, 2)]);
        let last = batch::headers(&read.records).next().unwrap();
        assert_eq!((last.base_sequence, last.last_offset()), (1, 1));
        assert_eq!(decode(&read.records).len(), 4);
    }

    #[tokio::test]
    async fn aborted_batches_go_and_a_marker_goes_after_its_transaction_and_horizon() {
        let store = Arc::new(MemoryStore::default());
        let log = PartitionLog::open(1, store.clone() as Arc<dyn LogStore>, 0).unwrap();
        log.set_segment_limits(1, i64::MAX);
        let marker = |pid, kind| log.append_marker(pid, 0, kind, 0, 0, false);
        let plain = |kvs: &[(Option<&str>, Option<&str>)]| encode(0, kvs, Compression::None);
        // 0-1: producer 7 writes a and b, then aborts (2). 3: producer 8 commits a (4).
        log.append(
            &encode_txn(7, 0, &[(Some("a"), Some("x")), (Some("b"), Some("x"))]),
            opts(),
        )
        .await
        .unwrap();
        marker(7, ControlType::Abort).await.unwrap();
        log.append(&encode_txn(8, 0, &[(Some("a"), Some("c"))]), opts())
            .await
            .unwrap();
        marker(8, ControlType::Commit).await.unwrap();
        // 5: plain c. 6: producer 7's next transaction writes b and commits (7). 8: plain z.
        log.append(&plain(&[(Some("c"), Some("p"))]), opts())
            .await
            .unwrap();
        log.append(&encode_txn(7, 2, &[(Some("b"), Some("y"))]), opts())
            .await
            .unwrap();
        marker(7, ControlType::Commit).await.unwrap();
        log.append(&plain(&[(Some("z"), Some("1"))]), opts())
            .await
            .unwrap();
        let committed = || async {
            let r = log
                .read(0, 1 << 20, true, ReadUpTo::LastStable)
                .await
                .unwrap();
            let bases: Vec<i64> = batch::headers(&r.records).map(|h| h.base_offset).collect();
            (bases, r.aborted.unwrap())
        };
        assert_eq!(committed().await.1, vec![(7, 0)]);

        // Pass 1: the aborted batch goes; its marker stays, as a batch of it was met. The
        // aborted records were not mapped, so the committed values stay.
        clean(&log, 100).await.expect("a pass");
        let (bases, aborted) = committed().await;
        assert_eq!(bases, vec![2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(aborted, vec![(7, 0)]);
        let got = values(&log).await;
        let v = |s: &str| Some(s.to_string());
        assert_eq!(
            got,
            vec![
                (3, "a".into(), v("c")),
                (5, "c".into(), v("p")),
                (6, "b".into(), v("y")),
                (8, "z".into(), v("1")),
            ]
        );

        // Pass 2 (new dirty data): the abort marker has nothing left: it is stamped.
        log.append(&plain(&[(Some("z"), Some("2"))]), opts())
            .await
            .unwrap();
        clean(&log, 100).await.expect("a pass");
        let read = log
            .read(0, 1 << 20, true, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        let first = batch::headers(&read.records).next().unwrap();
        assert_eq!((first.base_offset, first.delete_horizon()), (2, Some(100)));
        assert!(first.is_control());
        // The commit markers stay: their transactions' batches are still there.
        assert!(batch::headers(&read.records)
            .all(|h| h.base_offset == 2 || h.delete_horizon().is_none()));

        // Pass 3, once the horizon passed: the marker and its index entry go, so a
        // read_committed consumer is not told to skip producer 7's later transaction.
        clean(&log, 101).await.expect("a pass");
        let (bases, aborted) = committed().await;
        assert_eq!(bases, vec![3, 4, 5, 6, 7, 8, 9]);
        assert!(aborted.is_empty(), "{aborted:?}");
        assert!(store.aborted_txns(1).unwrap().is_empty());
    }
}
