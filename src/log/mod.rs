//! A partition's log: appends (offsets, leader epochs, idempotence), reads, the log end
//! offset (LEO), the high watermark (HW), the log start offset, retention and the leader
//! epoch cache. Batches go to a [`LogStore`]; the most recent ones stay in memory so that
//! consumers at the tail never read storage.
//!
//! The HW is kept apart from the LEO even on one node: consumers read only below the HW,
//! and the HW is the minimum LEO over the in-sync replicas. On a leader whose ISR is itself
//! alone (every partition of a single node), the HW follows the LEO as soon as an append is written;
//! otherwise `replication` moves it as followers fetch.
//!
//! Transactions (KIP-98): a transactional batch opens its producer's transaction in this
//! partition, and a marker (a control batch written by [`PartitionLog::append_marker`]) closes
//! it. The last stable offset (LSO) is the HW, held back to the first offset of the oldest
//! transaction still open or whose marker the HW has not passed; `read_committed` consumers
//! read only below it. Each aborted transaction gets an entry in the aborted-transactions
//! index, which Fetch hands to `read_committed` consumers so they can drop its records.

pub mod batch;
pub mod clean;
pub mod producer;
pub mod reads;
pub mod writes;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::{Bytes, BytesMut};
use tokio::sync::{Mutex, Notify};

use crate::error::{Error, Result};
use crate::storage::{AbortedTxn, Append, BatchMeta, LogStore, PartitionId};
use batch::{BatchHeader, ControlType};
use producer::{ProducerState, SeqCheck};
use writes::Writer;

/// Bytes of recent batches each partition keeps in memory for tail reads.
pub const TAIL_CACHE_BYTES_MAX: usize = 2 << 20;
/// Bytes all partitions' tail caches may hold together: past it, a partition that appends
/// keeps only its newest batch, so memory stays bounded however many partitions there are.
pub const TAIL_CACHE_TOTAL_BYTES_MAX: usize = 64 << 20;
pub(crate) static TAIL_CACHE_TOTAL: AtomicUsize = AtomicUsize::new(0);

/// Store reads running at once, broker-wide: one per core. Fetches read on tokio's
/// blocking pool, which grows a thread per read; unbounded, 32 greedy consumers reading a
/// backlog ran about 130 reading threads on two cores, and every other client's request
/// waited its turn among them (a producer's p50 went from 0.05 to 25 ms, docs/FLOOD.md).
/// With a slot per core the reads take as much of the cores as before, in turn, and the
/// other requests' tasks find a core free. The turns are fair among connections
/// ([`reads`]).
static STORE_READS: std::sync::LazyLock<reads::ReadSlots> = std::sync::LazyLock::new(|| {
    reads::ReadSlots::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
});

/// The most a read takes from the store in one turn of a slot: a larger read is taken in
/// pieces, so a read of another connection waits for one piece at most, not a 50 MiB read.
pub const STORE_READ_PIECE: usize = 4 << 20;

/// Runs `read` on the blocking pool once a store read slot is free, charging the work to
/// the request being metered and the bytes it read (the second of its results) to the
/// connection's turns. The slot goes with the read and is let go on the blocking thread the
/// moment the read ends: the next waiting read is given it then, not once this task has
/// been woken again, and a read whose request went away still holds its slot until it
/// stops.
async fn in_a_read_slot<T: Send + 'static>(
    read: impl FnOnce() -> Result<(T, usize)> + Send + 'static,
) -> Result<T> {
    let slot = STORE_READS.acquire().await;
    crate::thread_time::blocking(move || {
        let (out, bytes) = read()?;
        slot.charge(bytes);
        Ok(out)
    })
    .await
    .map_err(|e| Error::Storage(format!("read task failed: {e}")))?
}

/// Reads stored batches of `id` from `from`, up to `max_bytes` (as
/// [`LogStore::read_batches`]), in a store read slot.
async fn read_stored(
    store: &Arc<dyn LogStore>,
    id: PartitionId,
    from: i64,
    max_bytes: usize,
) -> Result<Vec<Bytes>> {
    let store = store.clone();
    in_a_read_slot(move || {
        let read = store.read_batches(id, from, max_bytes)?;
        let len = read.iter().map(Bytes::len).sum();
        Ok((read, len))
    })
    .await
}

/// How a produced batch is to be appended.
#[derive(Debug, Clone, Copy)]
pub struct AppendOptions {
    pub max_message_bytes: i32,
    /// Sync the write before acknowledging (topic `flush.messages=1`).
    pub durable: bool,
    /// `Some(now)` for topics with `message.timestamp.type=LogAppendTime`.
    pub log_append_time_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    pub log_start_offset: i64,
    /// True when this was a retry of a batch already in the log.
    pub duplicate: bool,
    /// Records in the batch (Kafka's messages in).
    pub records: u64,
}

/// How far a read may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadUpTo {
    /// Everything written: follower replicas.
    LogEnd,
    /// Everything committed: `read_uncommitted` consumers.
    HighWatermark,
    /// Everything stable, with the aborted transactions in the range: `read_committed`
    /// consumers.
    LastStable,
}

/// What a read returns: whole batches plus the partition's offsets at the time. The
/// batches come in one buffer ([`PartitionLog::read`]) or in the pieces the store and the
/// tail cache hold them in ([`PartitionLog::read_pieces`]).
#[derive(Debug, Clone, Default)]
pub struct ReadResult<R = Bytes> {
    pub records: R,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_end_offset: i64,
    pub log_start_offset: i64,
    /// For [`ReadUpTo::LastStable`]: (producer id, first offset) of each aborted transaction
    /// whose records may be among those returned, as Fetch's `aborted_transactions`.
    pub aborted: Option<Vec<(i64, i64)>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub log_start: i64,
    pub high_watermark: i64,
    pub last_stable: i64,
    pub log_end: i64,
    pub leader_epoch: i32,
    /// Where the current leader epoch began in this log (-1: not in the epoch cache). A
    /// new leader's HW can lag it until the followers have fetched.
    pub epoch_start: i64,
}

/// A producer as DescribeProducers shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerView {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_sequence: i32,
    pub coordinator_epoch: i32,
    pub txn_first_offset: Option<i64>,
    pub last_timestamp: i64,
}

/// A producer's transaction as the partition sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTxn {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_offset: i64,
}

struct Cached {
    base: i64,
    last: i64,
    bytes: Bytes,
}

struct ReadState {
    log_start: i64,
    leo: i64,
    hw: i64,
    leader_epoch: i32,
    /// (epoch, start offset), ascending: the leader epoch cache.
    epochs: Vec<(i32, i64)>,
    /// The epoch most recently written to storage, so a new one is recorded with its first batch.
    stored_epoch: Option<i32>,
    size_bytes: u64,
    tail: VecDeque<Cached>,
    tail_bytes: usize,
    /// The HW follows the LEO on every append: true while this replica is the whole ISR
    /// (a partition of one replica, or a leader whose followers all dropped out). Otherwise the
    /// replication layer moves the HW with [`PartitionLog::advance_hw`].
    sole_replica: bool,
    /// Open transactions: first offset -> producer id.
    open_txns: BTreeMap<i64, i64>,
    /// Transactions whose marker is written but not yet below the HW: (first offset, marker
    /// offset). They hold the LSO back as open ones do.
    closing_txns: Vec<(i64, i64)>,
    /// The aborted-transactions index, in marker offset order.
    aborted: Vec<AbortedTxn>,
    /// The active segment: the newest part of the log, which the cleaner never touches.
    active: ActiveSegment,
    /// The topic's `segment.bytes` and `segment.ms`, which end the active segment.
    segment_limits: (u64, i64),
    /// The first offset the log cleaner has not cleaned yet.
    cleaned_to: i64,
    /// The earliest delete horizon (KIP-534) the cleaner stamped on a batch of tombstones or
    /// on a transaction marker: from then on a pass can remove them, dirty section or not.
    /// At start-up it is unknown, so the first look finds the partition due once.
    earliest_delete_horizon: Option<i64>,
    /// Counts the cuts of the log's end (follower truncation, reset), so a cleaner pass
    /// that read the log before one does not write.
    generation: u64,
}

/// Kafka's active segment, kept as bounds only (the store has no segments): it starts at
/// the first batch appended after the previous one filled up or grew old; at start-up, at
/// the newest batch stored.
#[derive(Debug, Clone, Copy)]
struct ActiveSegment {
    start: i64,
    started_ms: i64,
    bytes: u64,
}

/// Kafka's default `segment.bytes` and `segment.ms`, until the cleaner sets the topic's.
const SEGMENT_LIMITS_DEFAULT: (u64, i64) = (1 << 30, 7 * 24 * 3_600_000);

impl ReadState {
    /// The LSO: the HW, held back by open transactions and by closed ones whose marker the
    /// HW has not passed; never below the log start.
    fn last_stable(&self) -> i64 {
        let open = self.open_txns.keys().next().copied().unwrap_or(i64::MAX);
        let closing = self
            .closing_txns
            .iter()
            .filter(|(_, marker)| *marker >= self.hw)
            .map(|(first, _)| *first)
            .min()
            .unwrap_or(i64::MAX);
        self.hw.min(open).min(closing).max(self.log_start)
    }

    /// Records what a batch did to a producer's transaction: `before`/`after` are its open
    /// transaction's first offset, `marker` the offset of the marker that closed it.
    fn note_txn(&mut self, pid: i64, before: Option<i64>, after: Option<i64>, marker: Option<i64>) {
        if before == after {
            return;
        }
        if let Some(first) = before {
            self.open_txns.remove(&first);
            if let Some(m) = marker {
                if m >= self.hw {
                    self.closing_txns.push((first, m));
                }
            }
        }
        if let Some(first) = after {
            self.open_txns.insert(first, pid);
        }
    }

    /// A batch of `size` bytes is about to be written at `base`: it starts a new active
    /// segment when the current one is full or old.
    fn roll_for(&mut self, base: i64, size: u64) {
        let now = crate::clock::now_ms();
        let (max_bytes, max_ms) = self.segment_limits;
        let a = &mut self.active;
        if a.bytes > 0 && (a.bytes + size > max_bytes || now - a.started_ms >= max_ms) {
            *a = ActiveSegment {
                start: base,
                started_ms: now,
                bytes: 0,
            };
        }
        a.bytes += size;
    }

    /// The HW moved: closed transactions it passed no longer hold the LSO.
    fn hw_moved(&mut self) {
        let hw = self.hw;
        self.closing_txns.retain(|(_, marker)| *marker >= hw);
    }

    /// Where the next batch goes on a leader: (offset, leader epoch, the epoch entry to
    /// write with it when this epoch has none stored yet).
    fn next_position(&self) -> (i64, i32, Option<(i32, i64)>) {
        let epoch_start = match self.stored_epoch {
            Some(e) if e == self.leader_epoch => None,
            _ => Some((self.leader_epoch, self.leo)),
        };
        (self.leo, self.leader_epoch, epoch_start)
    }

    /// A leader's batch is written at `meta` (in `leader_epoch`, with its epoch entry when
    /// `new_epoch`): the LEO, size and tail follow, and the HW too while this replica is
    /// the whole ISR.
    fn leader_wrote(&mut self, meta: &BatchMeta, bytes: Bytes, leader_epoch: i32, new_epoch: bool) {
        self.roll_for(meta.base_offset, meta.size as u64);
        self.leo = meta.last_offset + 1;
        if new_epoch {
            self.stored_epoch = Some(leader_epoch);
        }
        self.size_bytes += meta.size as u64;
        push_tail(self, meta.base_offset, meta.last_offset, bytes);
        // HW = min LEO over the ISR: the LEO itself when the ISR is this replica alone.
        if self.sole_replica {
            self.hw = self.leo;
            self.hw_moved();
        }
    }
}

/// The aborted-index entry of `producer_id`'s transaction [first, marker], with Kafka's
/// LSO at completion: the first offset of another transaction still open, else the offset
/// after the marker. `open` is the partition's open transactions (first offset -> producer).
fn aborted_entry(
    open: &BTreeMap<i64, i64>,
    producer_id: i64,
    first: i64,
    marker: i64,
) -> AbortedTxn {
    let others = open
        .iter()
        .find(|(f, pid)| **f != first || **pid != producer_id)
        .map(|(f, _)| *f);
    AbortedTxn {
        producer_id,
        first_offset: first,
        last_offset: marker,
        last_stable_offset: others.unwrap_or(marker + 1).min(marker + 1),
    }
}

pub struct PartitionLog {
    pub id: PartitionId,
    /// Writes appends to its store, with other partitions' appends of the same moment.
    writer: Arc<Writer>,
    /// Serialises the changes of this partition (offset assignment, producer checks,
    /// truncation); held across the storage write so offsets are stored in order.
    appends: Mutex<HashMap<i64, ProducerState>>,
    state: RwLock<ReadState>,
    /// Woken whenever the high watermark moves, for long-polling fetches.
    pub hw_moved: Notify,
    /// Woken on every append, for followers' long-polling fetches (they read to the LEO).
    pub appended: Notify,
}

impl PartitionLog {
    /// Opens a partition's log from storage (blocking: call at start-up or off the runtime),
    /// with a writer of its own.
    pub fn open(
        id: PartitionId,
        store: Arc<dyn LogStore>,
        leader_epoch: i32,
    ) -> Result<PartitionLog> {
        PartitionLog::open_with(id, Writer::new(store), leader_epoch)
    }

    /// Opens a partition's log, appending through `writer` (shared by the partitions of
    /// its store).
    pub fn open_with(
        id: PartitionId,
        writer: Arc<Writer>,
        leader_epoch: i32,
    ) -> Result<PartitionLog> {
        let store = writer.store().clone();
        let log_start = store.log_start(id)?.unwrap_or(0);
        let last = store.last_batch(id)?;
        let leo = match &last {
            Some(m) => (m.last_offset + 1).max(log_start),
            None => log_start,
        };
        // Kafka's active segment outlives a restart (appends go on into the last segment
        // file), so the newest batch stays out of the cleaner's reach as it was before.
        let (active_start, active_bytes) = match &last {
            Some(m) if m.last_offset >= log_start => (m.base_offset.max(log_start), m.size as u64),
            _ => (leo, 0),
        };
        let mut producers = HashMap::new();
        let mut open_txns = BTreeMap::new();
        let loaded_at = crate::clock::now_ms();
        for (pid, v) in store.producer_states(id)? {
            let mut s = ProducerState::decode(&v).ok_or_else(|| {
                Error::Storage(format!(
                    "producer state {pid} of partition {id} is malformed"
                ))
            })?;
            if s.last_timestamp < 0 {
                // Written before states kept it: expiration counts from now.
                s.last_timestamp = loaded_at;
            }
            if let Some(first) = s.txn_first_offset {
                open_txns.insert(first, pid);
            }
            producers.insert(pid, s);
        }
        let aborted = store.aborted_txns(id)?;
        let mut epochs = store.epochs(id)?;
        let stored_epoch = epochs.last().map(|e| e.0);
        // As Kafka's Partition.makeLeader does: the current epoch starts at the LEO.
        if epochs.last().is_none_or(|e| e.0 < leader_epoch) {
            epochs.push((leader_epoch, leo));
        }
        let size_bytes = store.size_bytes(id)?;
        let cleaned_to = store.cleaned_to(id)?.unwrap_or(0).min(leo);
        Ok(PartitionLog {
            id,
            writer,
            appends: Mutex::new(producers),
            state: RwLock::new(ReadState {
                log_start,
                leo,
                // The ISR is this broker alone, so everything written is committed.
                hw: leo,
                leader_epoch,
                epochs,
                stored_epoch,
                size_bytes,
                tail: VecDeque::new(),
                tail_bytes: 0,
                sole_replica: true,
                open_txns,
                closing_txns: Vec::new(),
                aborted,
                active: ActiveSegment {
                    start: active_start,
                    started_ms: loaded_at,
                    bytes: active_bytes,
                },
                segment_limits: SEGMENT_LIMITS_DEFAULT,
                cleaned_to,
                earliest_delete_horizon: Some(i64::MIN),
                generation: 0,
            }),
            hw_moved: Notify::new(),
            appended: Notify::new(),
        })
    }

    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, ReadState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, ReadState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn offsets(&self) -> Offsets {
        let s = self.read_state();
        Offsets {
            log_start: s.log_start,
            high_watermark: s.hw,
            last_stable: s.last_stable(),
            log_end: s.leo,
            leader_epoch: s.leader_epoch,
            epoch_start: s
                .epochs
                .iter()
                .find(|e| e.0 == s.leader_epoch)
                .map_or(-1, |e| e.1),
        }
    }

    fn store(&self) -> &Arc<dyn LogStore> {
        self.writer.store()
    }

    pub fn size_bytes(&self) -> u64 {
        self.read_state().size_bytes
    }

    /// Validates and appends one produced batch. On success the batch is written and, the
    /// ISR being this broker alone, committed (below the HW).
    pub async fn append(&self, records: &Bytes, opts: AppendOptions) -> Result<Appended> {
        let header = batch::validate_produced(records, opts.max_message_bytes)?;
        let mut producers = self.appends.lock().await;
        let prior = if header.is_idempotent() {
            let prior = producers.get(&header.producer_id);
            if let SeqCheck::Duplicate { base_offset } = ProducerState::check(prior, &header)? {
                return Ok(Appended {
                    base_offset,
                    log_start_offset: self.read_state().log_start,
                    duplicate: true,
                    records: 0,
                });
            }
            if !header.is_transactional() && prior.is_some_and(|p| p.txn_first_offset.is_some()) {
                // Kafka's ProducerAppendInfo: a producer inside a transaction writes only
                // transactional batches until its marker.
                return Err(Error::InvalidTxnState(format!(
                    "producer {} has an open transaction but sent a non-transactional batch",
                    header.producer_id
                )));
            }
            prior.cloned()
        } else {
            None
        };

        let (base_offset, leader_epoch, epoch_start) = self.read_state().next_position();
        let stamped = batch::stamp(records, base_offset, leader_epoch, opts.log_append_time_ms);
        let meta = BatchMeta {
            base_offset,
            last_offset: base_offset + header.last_offset_delta as i64,
            max_timestamp: opts.log_append_time_ms.unwrap_or(header.max_timestamp),
            size: stamped.len() as u32,
        };
        let new_state = header
            .is_idempotent()
            .then(|| ProducerState::after_append(prior.as_ref(), &header, base_offset));
        let append = Append {
            partition: self.id,
            meta,
            batch: stamped.clone(),
            producer: new_state.as_ref().map(|s| (header.producer_id, s.encode())),
            epoch_start,
            aborted: None,
        };
        self.writer.append(vec![append], opts.durable).await?;

        let txn_change = new_state.as_ref().map(|n| {
            (
                prior.as_ref().and_then(|p| p.txn_first_offset),
                n.txn_first_offset,
            )
        });
        if let Some(s) = new_state {
            producers.insert(header.producer_id, s);
        }
        let log_start_offset = {
            let mut s = self.write_state();
            if let Some((before, after)) = txn_change {
                s.note_txn(header.producer_id, before, after, None);
            }
            s.leader_wrote(&meta, stamped, leader_epoch, epoch_start.is_some());
            s.log_start
        };
        drop(producers);
        self.hw_moved.notify_waiters();
        self.appended.notify_waiters();
        Ok(Appended {
            base_offset,
            log_start_offset,
            duplicate: false,
            records: header.last_offset_delta as u64 + 1,
        })
    }

    /// Writes a transaction marker for `producer_id` (WriteTxnMarkers on the leader) and
    /// closes its transaction here; an ABORT of a transaction that wrote here gets an entry
    /// in the aborted-transactions index. A marker for a producer with nothing open is
    /// still written, as Kafka does. Returns the marker's offset.
    pub async fn append_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        kind: ControlType,
        coordinator_epoch: i32,
        now_ms: i64,
        durable: bool,
    ) -> Result<i64> {
        let mut producers = self.appends.lock().await;
        let prior = producers.get(&producer_id);
        ProducerState::check_marker(prior, producer_epoch, coordinator_epoch)?;
        let before = prior.and_then(|p| p.txn_first_offset);
        let (offset, leader_epoch, epoch_start) = self.read_state().next_position();
        let (next, applied) =
            ProducerState::after_marker(prior, producer_epoch, coordinator_epoch, offset, now_ms);
        let marker =
            batch::control_batch(producer_id, producer_epoch, kind, coordinator_epoch, now_ms);
        let stamped = batch::stamp(&marker, offset, leader_epoch, None);
        // The append lock is held: open transactions cannot change meanwhile.
        let aborted = match (kind, applied.closed) {
            (ControlType::Abort, Some((first, last))) => Some(aborted_entry(
                &self.read_state().open_txns,
                producer_id,
                first,
                last,
            )),
            _ => None,
        };
        let meta = BatchMeta {
            base_offset: offset,
            last_offset: offset,
            max_timestamp: now_ms,
            size: stamped.len() as u32,
        };
        let append = Append {
            partition: self.id,
            meta,
            batch: stamped.clone(),
            producer: Some((producer_id, next.encode())),
            epoch_start,
            aborted,
        };
        self.writer.append(vec![append], durable).await?;
        producers.insert(producer_id, next);
        {
            let mut s = self.write_state();
            s.note_txn(producer_id, before, None, Some(offset));
            if let Some(a) = aborted {
                s.aborted.push(a);
            }
            s.leader_wrote(&meta, stamped, leader_epoch, epoch_start.is_some());
        }
        drop(producers);
        self.hw_moved.notify_waiters();
        self.appended.notify_waiters();
        Ok(offset)
    }

    /// Whether `producer_id` has a transaction open in this partition (a transactional
    /// batch then needs no verification with the coordinator).
    /// Whether `producer_id` has a transaction open here at `epoch`. A batch of a newer
    /// epoch starts another transaction: under transaction version 2 the epoch is bumped at
    /// every end, and the next transaction's first batch may arrive before the marker that
    /// closes the last one here.
    pub async fn has_open_txn(&self, producer_id: i64, epoch: i16) -> bool {
        let open = self
            .read_state()
            .open_txns
            .values()
            .any(|p| *p == producer_id);
        open && self
            .appends
            .lock()
            .await
            .get(&producer_id)
            .is_some_and(|p| p.txn_first_offset.is_some() && p.epoch == epoch)
    }

    /// Forgets the producers that last wrote here `expiration_ms` ago (by their batches'
    /// timestamps) and have no transaction open, in memory and in storage, as Kafka's
    /// `producer.id.expiration.ms` does on every replica. A forgotten producer's next batch
    /// is taken like a new producer's. Returns how many were removed.
    pub async fn expire_producers(&self, now_ms: i64, expiration_ms: i64) -> Result<usize> {
        let mut producers = self.appends.lock().await;
        let expired: Vec<i64> = producers
            .iter()
            .filter(|(_, s)| s.expired(now_ms, expiration_ms))
            .map(|(pid, _)| *pid)
            .collect();
        if expired.is_empty() {
            return Ok(0);
        }
        let (store, id, pids) = (self.store().clone(), self.id, expired.clone());
        tokio::task::spawn_blocking(move || store.remove_producers(id, &pids))
            .await
            .map_err(|e| Error::Storage(format!("producer expiration task failed: {e}")))??;
        for pid in &expired {
            producers.remove(pid);
        }
        Ok(expired.len())
    }

    /// Every producer this partition remembers (DescribeProducers).
    pub async fn producers(&self) -> Vec<ProducerView> {
        let producers = self.appends.lock().await;
        let mut out: Vec<ProducerView> = producers
            .iter()
            .map(|(pid, p)| ProducerView {
                producer_id: *pid,
                producer_epoch: p.epoch,
                last_sequence: p.batches.back().map_or(-1, |b| b.last_seq),
                coordinator_epoch: p.coordinator_epoch,
                txn_first_offset: p.txn_first_offset,
                last_timestamp: p.last_timestamp,
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// The transactions open in this partition, oldest first (DescribeProducers and
    /// find-hanging).
    pub async fn open_transactions(&self) -> Vec<OpenTxn> {
        let producers = self.appends.lock().await;
        let mut open: Vec<OpenTxn> = producers
            .iter()
            .filter_map(|(pid, p)| {
                Some(OpenTxn {
                    producer_id: *pid,
                    producer_epoch: p.epoch,
                    first_offset: p.txn_first_offset?,
                })
            })
            .collect();
        open.sort_by_key(|t| t.first_offset);
        open
    }

    /// Reads whole batches from the one containing `offset`, up to `max_bytes` (at least one
    /// batch when `min_one`), below the LEO, the HW or the LSO (`upto`).
    pub async fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        upto: ReadUpTo,
    ) -> Result<ReadResult> {
        let r = self.read_pieces(offset, max_bytes, min_one, upto).await?;
        Ok(ReadResult {
            records: concat(r.records),
            high_watermark: r.high_watermark,
            last_stable_offset: r.last_stable_offset,
            log_end_offset: r.log_end_offset,
            log_start_offset: r.log_start_offset,
            aborted: r.aborted,
        })
    }

    /// As [`PartitionLog::read`], the batches in the pieces they were read in (each one or
    /// more whole batches): a Fetch response references them instead of joining them.
    pub async fn read_pieces(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        upto: ReadUpTo,
    ) -> Result<ReadResult<Vec<Bytes>>> {
        let (upper, offsets, from_tail) = {
            let s = self.read_state();
            if offset < s.log_start || offset > s.leo {
                return Err(Error::OffsetOutOfRange {
                    offset,
                    start: s.log_start,
                    end: s.leo,
                });
            }
            let lso = s.last_stable();
            let upper = match upto {
                ReadUpTo::LogEnd => s.leo,
                ReadUpTo::HighWatermark => s.hw,
                ReadUpTo::LastStable => lso,
            };
            let offsets = (s.hw, s.leo, s.log_start, lso);
            if offset >= upper {
                (upper, offsets, Some(Vec::new()))
            } else if s.tail.front().is_some_and(|c| c.base <= offset) {
                let mut out = Vec::new();
                let mut total = 0usize;
                for c in s.tail.iter().filter(|c| c.last >= offset && c.base < upper) {
                    if total + c.bytes.len() > max_bytes && (!out.is_empty() || !min_one) {
                        break;
                    }
                    total += c.bytes.len();
                    out.push(c.bytes.clone());
                }
                (upper, offsets, Some(out))
            } else {
                (upper, offsets, None)
            }
        };
        // Where the batches read end (a store's piece may hold several).
        let mut read_end = None;
        let batches = match from_tail {
            Some(b) => b,
            None => {
                let (records, end) = self
                    .read_in_pieces(offset, max_bytes, min_one, upper)
                    .await?;
                read_end = end;
                records
            }
        };
        let aborted = (upto == ReadUpTo::LastStable).then(|| {
            let end = read_end
                .or_else(|| {
                    batches
                        .last()
                        .and_then(|b| BatchHeader::parse(b).ok())
                        .map(|h| h.last_offset() + 1)
                })
                .unwrap_or(offset);
            self.aborted_between(offset, end)
        });
        Ok(ReadResult {
            records: batches,
            high_watermark: offsets.0,
            last_stable_offset: offsets.3,
            log_end_offset: offsets.1,
            log_start_offset: offsets.2,
            aborted,
        })
    }

    /// Whole batches from the one holding `offset`, below `upper`, within `max_bytes` (one
    /// at least when `min_one`), read from the store in turns of at most
    /// [`STORE_READ_PIECE`], each in its own turn of a read slot; in the pieces the store
    /// returned them in, with the offset after the last batch read.
    async fn read_in_pieces(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        upper: i64,
    ) -> Result<(Vec<Bytes>, Option<i64>)> {
        // Moves past each batch kept: the read ended at `next` when it kept any.
        let mut next = offset;
        let mut out = Vec::new();
        let mut read = 0usize;
        loop {
            let budget = max_bytes.saturating_sub(read).clamp(1, STORE_READ_PIECE);
            let pieces = read_stored(self.store(), self.id, next, budget).await?;
            let mut more = !pieces.is_empty();
            for piece in pieces {
                // The whole batches of `piece` to keep.
                let mut end = 0;
                while let Ok(h) = BatchHeader::parse(&piece[end..]) {
                    let past = read + end + h.size > max_bytes && (read + end > 0 || !min_one);
                    if h.base_offset >= upper || past {
                        more = false;
                        break;
                    }
                    end += h.size;
                    next = h.last_offset() + 1;
                }
                if end > 0 {
                    read += end;
                    out.push(piece.slice(..end));
                }
                if !more || end < piece.len() {
                    more = false;
                    break;
                }
            }
            if !more || next >= upper || read >= max_bytes {
                return Ok((out, (next > offset).then_some(next)));
            }
        }
    }

    /// The aborted transactions that may have records in [from, upper): those whose marker
    /// is at or after `from` and whose first offset is below `upper` (Kafka's
    /// `collectAbortedTransactions`), as (producer id, first offset).
    fn aborted_between(&self, from: i64, upper: i64) -> Vec<(i64, i64)> {
        let s = self.read_state();
        let at = s.aborted.partition_point(|t| t.last_offset < from);
        let mut out = Vec::new();
        for t in &s.aborted[at..] {
            if t.first_offset < upper {
                out.push((t.producer_id, t.first_offset));
            }
            // Every later entry's transaction started at or after this LSO.
            if t.last_stable_offset >= upper {
                break;
            }
        }
        out
    }

    /// The log start and the offset reads stop at for `upto`.
    fn start_and_upper(&self, upto: ReadUpTo) -> (i64, i64) {
        let s = self.read_state();
        let upper = match upto {
            ReadUpTo::LogEnd => s.leo,
            ReadUpTo::HighWatermark => s.hw,
            ReadUpTo::LastStable => s.last_stable(),
        };
        (s.log_start, upper)
    }

    /// The first offset whose record timestamp is at least `ts` (ListOffsets by time), with
    /// that record's timestamp; `None` when no committed record below `upto` is that recent.
    pub async fn offset_for_timestamp(
        &self,
        ts: i64,
        upto: ReadUpTo,
    ) -> Result<Option<(i64, i64)>> {
        let (start, hw) = self.start_and_upper(upto);
        let found = self
            .scan(start, None, move |found: &mut Option<BatchMeta>, m| {
                if m.base_offset >= hw {
                    return false;
                }
                if m.max_timestamp >= ts {
                    *found = Some(*m);
                    return false;
                }
                true
            })
            .await?;
        let Some(m) = found else { return Ok(None) };
        let exact = self
            .record_in_batch(&m, start, |b, h| batch::find_timestamp_in_batch(b, h, ts))
            .await?;
        // LogAppendTime batches (and ones that do not decode) answer at batch granularity.
        Ok(Some(
            exact.unwrap_or((m.base_offset.max(start), m.max_timestamp)),
        ))
    }

    /// The offset and timestamp of the committed record with the largest timestamp.
    pub async fn max_timestamp(&self, upto: ReadUpTo) -> Result<Option<(i64, i64)>> {
        let (start, hw) = self.start_and_upper(upto);
        let best = self
            .scan(start, None, move |best: &mut Option<BatchMeta>, m| {
                if m.base_offset >= hw {
                    return false;
                }
                if best.is_none_or(|b| m.max_timestamp > b.max_timestamp) {
                    *best = Some(*m);
                }
                true
            })
            .await?;
        let Some(m) = best else { return Ok(None) };
        let exact = self
            .record_in_batch(&m, start, batch::max_timestamp_record)
            .await?;
        Ok(Some(exact.unwrap_or((m.last_offset, m.max_timestamp))))
    }

    /// Reads the batch `m` and lets `pick` choose a record in it: (offset, timestamp), never
    /// below the log start. `None` when the batch's records cannot be read.
    async fn record_in_batch(
        &self,
        m: &BatchMeta,
        start: i64,
        pick: impl Fn(&[u8], &BatchHeader) -> Option<(i32, i64)>,
    ) -> Result<Option<(i64, i64)>> {
        let batch = self
            .read(m.base_offset.max(start), 1, true, ReadUpTo::HighWatermark)
            .await?;
        Ok(BatchHeader::parse(&batch.records).ok().and_then(|h| {
            pick(&batch.records, &h).map(|(d, t)| ((h.base_offset + d as i64).max(start), t))
        }))
    }

    /// Folds `f` over the batch metadata from `from` on, off the runtime, until it says stop.
    async fn scan<S: Send + 'static>(
        &self,
        from: i64,
        mut state: S,
        mut f: impl FnMut(&mut S, &BatchMeta) -> bool + Send + 'static,
    ) -> Result<S> {
        let store = self.store().clone();
        let id = self.id;
        crate::thread_time::blocking(move || {
            store.scan_batches(id, from, &mut |m| f(&mut state, m))?;
            Ok(state)
        })
        .await
        .map_err(|e| Error::Storage(format!("scan task failed: {e}")))?
    }

    /// The end offset of `epoch` as OffsetForLeaderEpoch answers it: (largest known epoch
    /// not above the request, the start offset of the next epoch or the LEO).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let s = self.read_state();
        let latest = s.epochs.last().map(|e| e.0);
        if epoch < 0 {
            return (-1, -1);
        }
        if latest == Some(epoch) {
            return (epoch, s.leo);
        }
        let Some(higher) = s.epochs.iter().find(|e| e.0 > epoch) else {
            return (-1, -1);
        };
        match s.epochs.iter().rev().find(|e| e.0 <= epoch) {
            Some(floor) => (floor.0, higher.1),
            None => (epoch, higher.1),
        }
    }

    /// The leader epoch under which `offset` was written (from the epoch cache).
    pub fn epoch_at(&self, offset: i64) -> i32 {
        let s = self.read_state();
        s.epochs
            .iter()
            .rev()
            .find(|(_, start)| *start <= offset)
            .map(|(e, _)| *e)
            .unwrap_or(s.leader_epoch)
    }

    /// Whether the HW has reached the start of the current leader epoch. A new leader's HW
    /// can lag what the old leader had already exposed until the followers fetch; Kafka
    /// answers OFFSET_NOT_AVAILABLE (retriable) to consumers' "latest" lookups meanwhile.
    pub fn check_hw_caught_up(&self) -> Result<()> {
        let o = self.offsets();
        match o.epoch_start > o.high_watermark {
            true => Err(Error::OffsetNotAvailable {
                hw: o.high_watermark,
                epoch_start: o.epoch_start,
            }),
            false => Ok(()),
        }
    }

    /// Checks a client's idea of the leader epoch against ours (-1: no check).
    pub fn check_leader_epoch(&self, client_epoch: i32) -> Result<()> {
        let current = self.read_state().leader_epoch;
        match client_epoch {
            e if e < 0 || e == current => Ok(()),
            e if e < current => Err(Error::FencedLeaderEpoch { got: e, current }),
            e => Err(Error::UnknownLeaderEpoch { got: e, current }),
        }
    }

    // ---- replication ----------------------------------------------------------------

    /// Takes a new role for `epoch`. A leader starts the epoch at its LEO, as Kafka's
    /// `makeLeader` does (the entry is written with the epoch's first batch); with
    /// `sole_replica` the HW follows the LEO, otherwise only [`Self::advance_hw`] moves it.
    /// A follower learns epochs from the leader's batches instead.
    pub fn set_role(&self, epoch: i32, leader: bool, sole_replica: bool) {
        let moved = {
            let mut s = self.write_state();
            s.leader_epoch = epoch;
            s.sole_replica = leader && sole_replica;
            let leo = s.leo;
            if leader && s.epochs.last().is_none_or(|e| e.0 < epoch) {
                s.epochs.push((epoch, leo));
            } else if !leader {
                // An epoch this replica led without writing a batch is not in its log: a
                // follower reporting it as its last epoch would diverge from every leader.
                let stored = s.stored_epoch;
                s.epochs.retain(|e| e.1 < leo || Some(e.0) == stored);
            }
            if s.sole_replica && s.hw < s.leo {
                s.hw = s.leo;
                s.hw_moved();
                true
            } else {
                false
            }
        };
        if moved {
            self.hw_moved.notify_waiters();
        }
    }

    /// Raises the HW to `hw` (capped at the LEO); it never goes back. Returns the HW.
    pub fn advance_hw(&self, hw: i64) -> i64 {
        let (now, moved) = {
            let mut s = self.write_state();
            let target = hw.min(s.leo);
            if target > s.hw {
                s.hw = target;
                s.hw_moved();
                (target, true)
            } else {
                (s.hw, false)
            }
        };
        if moved {
            self.hw_moved.notify_waiters();
        }
        now
    }

    /// The offset where `epoch` started in this log (the LEO if it is not in the cache).
    pub fn epoch_start(&self, epoch: i32) -> i64 {
        let s = self.read_state();
        s.epochs
            .iter()
            .find(|e| e.0 == epoch)
            .map_or(s.leo, |e| e.1)
    }

    /// The latest epoch in the epoch cache (-1 when empty): a follower's last fetched epoch.
    pub fn latest_epoch(&self) -> i32 {
        self.read_state().epochs.last().map_or(-1, |e| e.0)
    }

    /// Appends batches fetched from the leader as they are (offsets and epochs assigned by
    /// the leader), with the producer states and epoch entries they imply, in one write.
    /// Batches wholly below the LEO are skipped and a partial batch at the end is ignored.
    /// Returns the number of batches appended.
    pub async fn append_replica(&self, records: &Bytes) -> Result<usize> {
        let mut producers = self.appends.lock().await;
        let (mut leo, mut last_epoch) = {
            let s = self.read_state();
            (s.leo, s.epochs.last().map_or(-1, |e| e.0))
        };
        // The open transactions as this fetch changes them, copied only once a batch opens
        // or closes one (most fetches carry none).
        let mut open: Option<BTreeMap<i64, i64>> = None;
        let mut appends = Vec::new();
        let mut epochs = Vec::new();
        let mut states: HashMap<i64, ProducerState> = HashMap::new();
        // What each batch did to its producer's transaction: (pid, before, after, marker).
        let mut txn_changes = Vec::new();
        let mut at = 0usize;
        while at < records.len() {
            let Ok(h) = BatchHeader::parse(&records[at..]) else {
                break;
            };
            let bytes = records.slice(at..at + h.size);
            at += h.size;
            if h.last_offset() < leo {
                continue;
            }
            // Past the LEO is a gap the leader's cleaner made (its copy is compacted);
            // below it, the batch overlaps what this replica has.
            if h.base_offset < leo {
                return Err(Error::CorruptMessage(format!(
                    "replica batch at {} does not continue the log at {leo}",
                    h.base_offset
                )));
            }
            let epoch_start = (h.partition_leader_epoch > last_epoch).then(|| {
                last_epoch = h.partition_leader_epoch;
                epochs.push((h.partition_leader_epoch, h.base_offset));
                (h.partition_leader_epoch, h.base_offset)
            });
            let mut aborted = None;
            let producer = h.is_idempotent().then(|| {
                let prior = states.get(&h.producer_id).or(producers.get(&h.producer_id));
                let before = prior.and_then(|p| p.txn_first_offset);
                let (next, marker) = match batch::control_type(&bytes, &h) {
                    Some(kind) => {
                        // The leader checked the marker; a replica copies what it wrote.
                        let (next, applied) = ProducerState::after_marker(
                            prior,
                            h.producer_epoch,
                            batch::marker_coordinator_epoch(&bytes, &h).unwrap_or(-1),
                            h.base_offset,
                            h.max_timestamp,
                        );
                        if let (ControlType::Abort, Some((first, last))) = (kind, applied.closed) {
                            let open =
                                open.get_or_insert_with(|| self.read_state().open_txns.clone());
                            aborted = Some(aborted_entry(open, h.producer_id, first, last));
                        }
                        (next, Some(h.base_offset))
                    }
                    None => (ProducerState::after_append(prior, &h, h.base_offset), None),
                };
                if before != next.txn_first_offset {
                    let open = open.get_or_insert_with(|| self.read_state().open_txns.clone());
                    if let Some(f) = before {
                        open.remove(&f);
                    }
                    if let Some(f) = next.txn_first_offset {
                        open.insert(f, h.producer_id);
                    }
                    txn_changes.push((h.producer_id, before, next.txn_first_offset, marker));
                }
                let encoded = next.encode();
                states.insert(h.producer_id, next);
                (h.producer_id, encoded)
            });
            appends.push(Append {
                partition: self.id,
                meta: BatchMeta {
                    base_offset: h.base_offset,
                    last_offset: h.last_offset(),
                    max_timestamp: h.max_timestamp,
                    size: h.size as u32,
                },
                batch: bytes,
                producer,
                epoch_start,
                aborted,
            });
            leo = h.last_offset() + 1;
        }
        if appends.is_empty() {
            return Ok(0);
        }
        self.writer.append(appends.clone(), false).await?;
        producers.extend(states);
        let mut s = self.write_state();
        for (pid, before, after, marker) in txn_changes {
            s.note_txn(pid, before, after, marker);
        }
        for a in &appends {
            if let Some(t) = a.aborted {
                s.aborted.push(t);
            }
            s.roll_for(a.meta.base_offset, a.meta.size as u64);
            s.size_bytes += a.meta.size as u64;
            push_tail(
                &mut s,
                a.meta.base_offset,
                a.meta.last_offset,
                a.batch.clone(),
            );
        }
        s.leo = leo;
        if let Some(last) = epochs.last() {
            s.stored_epoch = Some(last.0);
        }
        s.epochs.extend(epochs);
        Ok(appends.len())
    }

    /// Cuts the log back to `end` (a follower whose log diverged from the leader's): the
    /// batches from there on, their epoch entries and the producer states' memory of them
    /// go, in one write. The HW is capped at the new LEO.
    pub async fn truncate_to(&self, end: i64) -> Result<()> {
        let mut producers = self.appends.lock().await;
        let (leo, start) = {
            let s = self.read_state();
            (s.leo, s.log_start)
        };
        let end = end.max(start);
        if end >= leo {
            // Nothing to cut but epochs that start at the LEO without a batch (see set_role).
            let mut s = self.write_state();
            let stored = s.stored_epoch;
            s.epochs.retain(|e| e.1 < end || Some(e.0) == stored);
            return Ok(());
        }
        let mut changed = Vec::new();
        for (pid, state) in producers.iter_mut() {
            if state.truncate(end) {
                changed.push((*pid, Some(state.encode())));
            }
        }
        let open_txns: BTreeMap<i64, i64> = producers
            .iter()
            .filter_map(|(pid, p)| Some((p.txn_first_offset?, *pid)))
            .collect();
        let store = self.store().clone();
        let id = self.id;
        let size = tokio::task::spawn_blocking(move || {
            store.truncate_suffix(id, end, &changed)?;
            store.size_bytes(id)
        })
        .await
        .map_err(|e| Error::Storage(format!("truncate task failed: {e}")))??;
        let mut s = self.write_state();
        s.leo = end;
        s.hw = s.hw.min(end);
        s.size_bytes = size;
        s.generation += 1;
        s.cleaned_to = s.cleaned_to.min(end);
        if s.active.start > end {
            s.active.start = end;
        }
        s.open_txns = open_txns;
        s.closing_txns.retain(|(_, marker)| *marker < end);
        s.aborted.retain(|t| t.last_offset < end);
        s.epochs.retain(|e| e.1 < end);
        s.stored_epoch = s.epochs.last().map(|e| e.0);
        while s.tail.back().is_some_and(|c| c.last >= end) {
            if let Some(c) = s.tail.pop_back() {
                s.tail_bytes -= c.bytes.len();
                TAIL_CACHE_TOTAL.fetch_sub(c.bytes.len(), Ordering::Relaxed);
            }
        }
        drop(s);
        drop(producers);
        tracing::info!(
            partition = self.id,
            from = leo,
            to = end,
            "truncated to the leader's log"
        );
        Ok(())
    }

    /// Empties the log and restarts it at `start` (a follower that fell below the leader's
    /// log start offset).
    pub async fn reset_to(&self, start: i64) -> Result<()> {
        {
            let (leo, log_start) = {
                let s = self.read_state();
                (s.leo, s.log_start)
            };
            self.truncate_to(log_start).await?;
            let _guard = self.appends.lock().await;
            let store = self.store().clone();
            let id = self.id;
            tokio::task::spawn_blocking(move || store.truncate_prefix(id, start))
                .await
                .map_err(|e| Error::Storage(format!("truncate task failed: {e}")))??;
            let mut s = self.write_state();
            s.log_start = start;
            s.leo = start;
            s.hw = start;
            s.generation += 1;
            s.cleaned_to = start;
            s.active.start = start;
            tracing::info!(
                partition = self.id,
                from = leo,
                to = start,
                "restarted the log at the leader's log start"
            );
        }
        Ok(())
    }

    /// Moves the log start offset forward to `offset` (DeleteRecords; -1 means the HW).
    /// As in Kafka, an explicit delete may pass the start of an open transaction: its
    /// records go, but the producer state and the transaction stay (the LSO is floored at
    /// the new log start until the marker comes). Returns the new log start offset.
    pub async fn delete_records(&self, offset: i64) -> Result<i64> {
        let _guard = self.appends.lock().await;
        let (start, hw) = {
            let s = self.read_state();
            (s.log_start, s.hw)
        };
        let target = if offset == -1 { hw } else { offset };
        if target < 0 || target > hw {
            return Err(Error::OffsetOutOfRange {
                offset: target,
                start,
                end: hw,
            });
        }
        if target <= start {
            return Ok(start);
        }
        self.truncate_prefix_locked(target).await?;
        Ok(target)
    }

    /// Applies time and size retention; returns the new log start offset if it moved.
    pub async fn apply_retention(
        &self,
        now_ms: i64,
        retention_ms: i64,
        retention_bytes: i64,
    ) -> Result<Option<i64>> {
        if retention_ms < 0 && retention_bytes < 0 {
            return Ok(None);
        }
        let _guard = self.appends.lock().await;
        // Up to the LSO, not the HW: an open transaction keeps its first batch.
        let (start, hw, size) = {
            let s = self.read_state();
            (s.log_start, s.last_stable(), s.size_bytes)
        };
        let cutoff = if retention_ms >= 0 {
            now_ms.saturating_sub(retention_ms)
        } else {
            i64::MIN
        };
        // Walk from the oldest batch while it is expired by time or by size; never past the
        // HW, so nothing consumers have not been allowed to read is removed.
        let (_, new_start) = self
            .scan(
                start,
                (size as i64, start),
                move |(remaining, new_start), m| {
                    let too_old = m.max_timestamp < cutoff;
                    let too_big =
                        retention_bytes >= 0 && *remaining - m.size as i64 >= retention_bytes;
                    if m.last_offset >= hw || !(too_old || too_big) {
                        return false;
                    }
                    *remaining -= m.size as i64;
                    *new_start = m.last_offset + 1;
                    true
                },
            )
            .await?;
        if new_start <= start {
            return Ok(None);
        }
        self.truncate_prefix_locked(new_start).await?;
        Ok(Some(new_start))
    }

    /// Truncates below `new_start`; the caller holds the append lock.
    async fn truncate_prefix_locked(&self, new_start: i64) -> Result<()> {
        let store = self.store().clone();
        let id = self.id;
        let size = tokio::task::spawn_blocking(move || {
            store.truncate_prefix(id, new_start)?;
            store.size_bytes(id)
        })
        .await
        .map_err(|e| Error::Storage(format!("truncate task failed: {e}")))??;
        let mut s = self.write_state();
        s.log_start = new_start;
        s.size_bytes = size;
        s.aborted.retain(|t| t.last_offset >= new_start);
        while s.tail.front().is_some_and(|c| c.last < new_start) {
            if let Some(c) = s.tail.pop_front() {
                s.tail_bytes -= c.bytes.len();
                TAIL_CACHE_TOTAL.fetch_sub(c.bytes.len(), Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

impl Drop for PartitionLog {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        TAIL_CACHE_TOTAL.fetch_sub(s.tail_bytes, Ordering::Relaxed);
    }
}

/// Keeps a just-written batch in the partition's tail cache, evicting the oldest batches
/// past this partition's or all partitions' budget (the newest one always stays).
fn push_tail(s: &mut ReadState, base: i64, last: i64, bytes: Bytes) {
    let added = bytes.len();
    s.tail_bytes += added;
    s.tail.push_back(Cached { base, last, bytes });
    let mut total = TAIL_CACHE_TOTAL.fetch_add(added, Ordering::Relaxed) + added;
    while (s.tail_bytes > TAIL_CACHE_BYTES_MAX || total > TAIL_CACHE_TOTAL_BYTES_MAX)
        && s.tail.len() > 1
    {
        if let Some(c) = s.tail.pop_front() {
            s.tail_bytes -= c.bytes.len();
            total = TAIL_CACHE_TOTAL.fetch_sub(c.bytes.len(), Ordering::Relaxed) - c.bytes.len();
        }
    }
}

fn concat(batches: Vec<Bytes>) -> Bytes {
    match batches.len() {
        0 => Bytes::new(),
        1 => batches.into_iter().next().unwrap_or_default(),
        _ => {
            let mut b = BytesMut::with_capacity(batches.iter().map(Bytes::len).sum());
            for x in batches {
                b.extend_from_slice(&x);
            }
            b.freeze()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStore;
    use batch::tests::batch;

    fn opts() -> AppendOptions {
        AppendOptions {
            max_message_bytes: 1 << 20,
            durable: false,
            log_append_time_ms: None,
        }
    }

    fn log(store: &Arc<MemoryStore>) -> PartitionLog {
        PartitionLog::open(1, store.clone() as Arc<dyn LogStore>, 0).unwrap()
    }

    #[tokio::test]
    async fn offsets_are_assigned_and_survive_reopen() {
        let store = Arc::new(MemoryStore::default());
        let l = log(&store);
        let a = l
            .append(&Bytes::from(batch(&[b"a", b"b"], None, 10)), opts())
            .await
            .unwrap();
        let b = l
            .append(&Bytes::from(batch(&[b"c"], None, 20)), opts())
            .await
            .unwrap();
        assert_eq!((a.base_offset, b.base_offset), (0, 2));
        let o = l.offsets();
        assert_eq!((o.log_end, o.high_watermark), (3, 3));
        let r = l
            .read(1, 1 << 20, true, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        let heads: Vec<_> = batch::headers(&r.records).map(|h| h.base_offset).collect();
        assert_eq!(
            heads,
            vec![0, 2],
            "the batch containing offset 1 comes whole"
        );
        assert!(matches!(
            l.read(4, 100, true, ReadUpTo::HighWatermark).await,
            Err(Error::OffsetOutOfRange { .. })
        ));
        assert!(l
            .read(3, 100, true, ReadUpTo::HighWatermark)
            .await
            .unwrap()
            .records
            .is_empty());

        let l2 = log(&store);
        assert_eq!(l2.offsets().log_end, 3);
        // Cold read from storage, not the tail cache.
        let r = l2.read(0, 1, true, ReadUpTo::HighWatermark).await.unwrap();
        assert_eq!(
            batch::headers(&r.records).count(),
            1,
            "one batch even past max_bytes"
        );
        assert_eq!(l2.end_offset_for_epoch(0), (0, 3));
    }

    #[tokio::test]
    async fn a_read_larger_than_a_piece_comes_whole_and_within_its_bytes() {
        let store = Arc::new(MemoryStore::default());
        let l = log(&store);
        // Ten batches of about a fifth of a piece each (within opts()' 1 MiB message size).
        let value = vec![7u8; STORE_READ_PIECE / 5];
        for i in 0..10 {
            l.append(&Bytes::from(batch(&[&value], None, i)), opts())
                .await
                .unwrap();
        }
        let size = l.size_bytes() as usize / 10;
        // From storage, not the tail cache.
        let l = log(&store);
        let bases = |r: &ReadResult| -> Vec<i64> {
            batch::headers(&r.records).map(|h| h.base_offset).collect()
        };
        let all = l
            .read(0, 100 * size, true, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        assert_eq!(bases(&all), (0..10).collect::<Vec<_>>());
        assert_eq!(all.records.len(), 10 * size);
        // Seven batches fit in 7.5 batches' bytes, in two pieces.
        let r = l
            .read(3, size * 15 / 2, false, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        assert_eq!(bases(&r), (3..10).collect::<Vec<_>>());
        assert_eq!(&r.records[..], &all.records[3 * size..]);
        let r = l
            .read(1, size * 5 / 2, false, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        assert_eq!(bases(&r), vec![1, 2]);
        // A batch larger than the bytes allowed: only when the read must return one.
        let r = l
            .read(0, size / 2, false, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        assert!(r.records.is_empty());
        let r = l
            .read(0, size / 2, true, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        assert_eq!(bases(&r), vec![0]);
        // In pieces: whole batches each, the same bytes as the joined read.
        for (from, max, min_one) in [
            (0, 100 * size, true),
            (3, size * 15 / 2, false),
            (0, size / 2, true),
        ] {
            let joined = l
                .read(from, max, min_one, ReadUpTo::HighWatermark)
                .await
                .unwrap();
            let r = l
                .read_pieces(from, max, min_one, ReadUpTo::HighWatermark)
                .await
                .unwrap();
            assert!(r
                .records
                .iter()
                .all(|p| batch::headers(p).map(|h| h.size).sum::<usize>() == p.len()));
            assert_eq!(r.records.concat(), joined.records, "{from} {max}");
        }
    }

    #[tokio::test]
    async fn idempotent_retries_get_the_original_offset() {
        let store = Arc::new(MemoryStore::default());
        let l = log(&store);
        let first = Bytes::from(batch(&[b"a"], Some((5, 0, 0)), 0));
        assert_eq!(l.append(&first, opts()).await.unwrap().base_offset, 0);
        l.append(&Bytes::from(batch(&[b"b"], Some((5, 0, 1)), 0)), opts())
            .await
            .unwrap();
        let again = l.append(&first, opts()).await.unwrap();
        assert!(again.duplicate);
        assert_eq!(again.base_offset, 0);
        assert_eq!(l.offsets().log_end, 2);
        let gap = l
            .append(&Bytes::from(batch(&[b"c"], Some((5, 0, 7)), 0)), opts())
            .await;
        assert!(matches!(gap, Err(Error::OutOfOrderSequence { .. })));
        // Producer state was written with the batch: a reopened log still dedupes.
        let l2 = log(&store);
        assert!(l2.append(&first, opts()).await.unwrap().duplicate);
    }

    #[tokio::test]
    async fn delete_records_and_retention_move_the_start() {
        let store = Arc::new(MemoryStore::default());
        let l = log(&store);
        for i in 0..5 {
            l.append(&Bytes::from(batch(&[b"xx"], None, 1000 + i)), opts())
                .await
                .unwrap();
        }
        assert_eq!(l.delete_records(2).await.unwrap(), 2);
        assert!(matches!(
            l.read(1, 100, true, ReadUpTo::HighWatermark).await,
            Err(Error::OffsetOutOfRange { .. })
        ));
        assert!(matches!(
            l.delete_records(9).await,
            Err(Error::OffsetOutOfRange { .. })
        ));
        // Everything older than 1003 goes; the rest stays.
        assert_eq!(l.apply_retention(1010, 7, -1).await.unwrap(), Some(3));
        let size_one = l.size_bytes() / 2;
        assert_eq!(
            l.apply_retention(0, -1, size_one as i64).await.unwrap(),
            Some(4)
        );
        assert_eq!(l.offsets().log_start, 4);
        assert_eq!(log(&store).offsets().log_start, 4);
    }

    #[tokio::test]
    async fn timestamps_and_epochs() {
        let store = Arc::new(MemoryStore::default());
        let l = log(&store);
        l.append(&Bytes::from(batch(&[b"a", b"b"], None, 100)), opts())
            .await
            .unwrap();
        l.append(&Bytes::from(batch(&[b"c"], None, 500)), opts())
            .await
            .unwrap();
        assert_eq!(
            l.offset_for_timestamp(101, ReadUpTo::HighWatermark)
                .await
                .unwrap(),
            Some((1, 101))
        );
        assert_eq!(
            l.offset_for_timestamp(200, ReadUpTo::HighWatermark)
                .await
                .unwrap(),
            Some((2, 500))
        );
        assert_eq!(
            l.offset_for_timestamp(501, ReadUpTo::HighWatermark)
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            l.max_timestamp(ReadUpTo::HighWatermark).await.unwrap(),
            Some((2, 500))
        );
        assert!(l.check_leader_epoch(0).is_ok());
        assert!(matches!(
            l.check_leader_epoch(3),
            Err(Error::UnknownLeaderEpoch { .. })
        ));
        assert_eq!(l.end_offset_for_epoch(7), (-1, -1));
    }

    #[tokio::test]
    async fn a_follower_copies_the_leaders_batches_and_truncates_where_it_diverges() {
        let (ls, fs) = (
            Arc::new(MemoryStore::default()),
            Arc::new(MemoryStore::default()),
        );
        let leader = log(&ls);
        leader.set_role(1, true, false);
        for i in 0..3 {
            leader
                .append(&Bytes::from(batch(&[b"x"], Some((9, 0, i)), 0)), opts())
                .await
                .unwrap();
        }
        // Not the whole ISR: the HW waits for the followers.
        assert_eq!(leader.offsets().high_watermark, 0);
        assert_eq!(leader.advance_hw(2), 2);
        assert_eq!(leader.advance_hw(1), 2, "the HW never goes back");
        leader.check_hw_caught_up().unwrap();
        // Re-elected (epoch 2 starts at the LEO, 3): until the HW gets there, consumers
        // asking for the latest offset are told to retry.
        leader.set_role(2, true, false);
        assert_eq!(leader.offsets().epoch_start, 3);
        assert!(matches!(
            leader.check_hw_caught_up(),
            Err(Error::OffsetNotAvailable {
                hw: 2,
                epoch_start: 3
            })
        ));
        leader.advance_hw(3);
        leader.check_hw_caught_up().unwrap();

        let follower = log(&fs);
        follower.set_role(1, false, false);
        let all = leader
            .read(0, 1 << 20, true, ReadUpTo::LogEnd)
            .await
            .unwrap()
            .records;
        assert_eq!(follower.append_replica(&all).await.unwrap(), 3);
        // Fetched again (a retry): nothing is written twice.
        assert_eq!(follower.append_replica(&all).await.unwrap(), 0);
        assert_eq!(follower.offsets().log_end, 3);
        assert_eq!(follower.latest_epoch(), 1);
        assert_eq!(follower.end_offset_for_epoch(1), (1, 3));

        // Led epoch 2 without writing, then followed again: epoch 2 is not in its log.
        follower.set_role(2, true, false);
        assert_eq!(follower.latest_epoch(), 2);
        follower.set_role(3, false, false);
        assert_eq!(
            follower.latest_epoch(),
            1,
            "an epoch without batches is forgotten"
        );
        // The follower wrote a batch in epoch 2 that the new leader (epoch 3) never had.
        follower.set_role(2, true, true);
        follower
            .append(&Bytes::from(batch(&[b"lost"], None, 0)), opts())
            .await
            .unwrap();
        follower.set_role(3, false, false);
        assert_eq!(follower.offsets().log_end, 4);
        follower.truncate_to(3).await.unwrap();
        assert_eq!(follower.offsets().log_end, 3);
        assert_eq!(follower.latest_epoch(), 1);
        // Producer state forgot the truncated batch, survives a reopen, and dedupes the rest.
        let reopened = log(&fs);
        assert_eq!(reopened.offsets().log_end, 3);
        reopened.set_role(4, true, true);
        let retry = Bytes::from(batch(&[b"x"], Some((9, 0, 2)), 0));
        assert!(reopened.append(&retry, opts()).await.unwrap().duplicate);
        let next = Bytes::from(batch(&[b"y"], Some((9, 0, 3)), 0));
        assert_eq!(reopened.append(&next, opts()).await.unwrap().base_offset, 3);
    }

    fn txn(values: &[&[u8]], pid: i64, seq: i32) -> Bytes {
        Bytes::from(batch::tests::txn_batch(values, (pid, 0, seq)))
    }

    fn bases(r: &ReadResult) -> Vec<i64> {
        batch::headers(&r.records).map(|h| h.base_offset).collect()
    }

    #[tokio::test]
    async fn open_transactions_hold_the_last_stable_offset_and_aborts_are_indexed() {
        let store = Arc::new(MemoryStore::default());
        let l = log(&store);
        l.append(&Bytes::from(batch(&[b"plain"], None, 0)), opts())
            .await
            .unwrap();
        // Producer 1 opens a transaction at 1, producer 2 at 2; plain data follows at 3.
        l.append(&txn(&[b"a", b"b"], 1, 0), opts()).await.unwrap();
        l.append(&txn(&[b"c"], 2, 0), opts()).await.unwrap();
        l.append(&Bytes::from(batch(&[b"d"], None, 0)), opts())
            .await
            .unwrap();
        let o = l.offsets();
        assert_eq!((o.high_watermark, o.last_stable), (5, 1));
        let committed = l
            .read(0, 1 << 20, true, ReadUpTo::LastStable)
            .await
            .unwrap();
        assert_eq!(bases(&committed), vec![0], "nothing at or past the LSO");
        assert_eq!(committed.last_stable_offset, 1);
        assert_eq!(committed.aborted, Some(vec![]));
        let uncommitted = l
            .read(0, 1 << 20, true, ReadUpTo::HighWatermark)
            .await
            .unwrap();
        assert_eq!(bases(&uncommitted), vec![0, 1, 3, 4]);
        assert_eq!(uncommitted.aborted, None);
        assert_eq!(
            l.open_transactions()
                .await
                .iter()
                .map(|t| (t.producer_id, t.first_offset))
                .collect::<Vec<_>>(),
            vec![(1, 1), (2, 3)]
        );

        // A producer inside a transaction may not write outside it.
        let plain_from_1 = Bytes::from(batch(&[b"x"], Some((1, 0, 2)), 0));
        assert!(matches!(
            l.append(&plain_from_1, opts()).await,
            Err(Error::InvalidTxnState(_))
        ));

        // Producer 1 aborts: its entry goes in the index; producer 2 still holds the LSO.
        let abort = l
            .append_marker(1, 0, ControlType::Abort, 5, 0, false)
            .await
            .unwrap();
        assert_eq!(abort, 5);
        assert_eq!(l.offsets().last_stable, 3);
        // A fenced coordinator's marker (older than the last one this producer saw) is
        // refused and nothing is written.
        assert!(matches!(
            l.append_marker(1, 0, ControlType::Commit, 4, 0, false)
                .await,
            Err(Error::TransactionCoordinatorFenced { .. })
        ));
        assert_eq!(l.offsets().log_end, 6);
        l.append_marker(2, 0, ControlType::Commit, 5, 0, false)
            .await
            .unwrap();
        let o = l.offsets();
        assert_eq!((o.log_end, o.high_watermark, o.last_stable), (7, 7, 7));
        let r = l
            .read(0, 1 << 20, true, ReadUpTo::LastStable)
            .await
            .unwrap();
        assert_eq!(bases(&r), vec![0, 1, 3, 4, 5, 6]);
        assert_eq!(r.aborted, Some(vec![(1, 1)]));
        // From past the abort marker, nothing aborted is in range.
        let later = l
            .read(6, 1 << 20, true, ReadUpTo::LastStable)
            .await
            .unwrap();
        assert_eq!(later.aborted, Some(vec![]));
        let kinds: Vec<_> = {
            let mut rest = &r.records[..];
            batch::headers(&r.records)
                .map(|h| {
                    let (b, next) = rest.split_at(h.size);
                    rest = next;
                    batch::control_type(b, &h)
                })
                .collect()
        };
        assert_eq!(
            kinds[4..],
            [Some(ControlType::Abort), Some(ControlType::Commit)]
        );

        // Reopened from storage: the index and the closed state survive.
        let again = log(&store);
        assert_eq!(again.offsets().last_stable, 7);
        let r = again
            .read(0, 1 << 20, true, ReadUpTo::LastStable)
            .await
            .unwrap();
        assert_eq!(r.aborted, Some(vec![(1, 1)]));
        assert!(again.open_transactions().await.is_empty());
        // A new transaction of producer 1 survives a reopen while open.
        again.append(&txn(&[b"e"], 1, 2), opts()).await.unwrap();
        let third = log(&store);
        assert_eq!(third.offsets().last_stable, 7);
        assert_eq!(third.open_transactions().await.len(), 1);
    }

    #[tokio::test]
    async fn retention_stops_at_an_open_transaction_and_delete_records_keeps_it_open() {
        let store = Arc::new(MemoryStore::default());
        let l = log(&store);
        l.append(&Bytes::from(batch(&[b"old"], None, 10)), opts())
            .await
            .unwrap();
        l.append(&txn(&[b"t"], 3, 0), opts()).await.unwrap();
        l.append(&Bytes::from(batch(&[b"new"], None, 20)), opts())
            .await
            .unwrap();
        // Retention never passes the open transaction's first offset.
        assert_eq!(l.apply_retention(1_000_000, 1, -1).await.unwrap(), Some(1));
        // DeleteRecords may (as in Kafka); the transaction stays open and holds the LSO at
        // the new log start until its marker.
        assert_eq!(l.delete_records(3).await.unwrap(), 3);
        assert_eq!(l.offsets().last_stable, 3);
        assert_eq!(l.open_transactions().await.len(), 1);
        l.append_marker(3, 0, ControlType::Commit, 0, 30, false)
            .await
            .unwrap();
        assert_eq!(l.offsets().last_stable, 4);
        assert_eq!(l.delete_records(-1).await.unwrap(), 4);
    }

    #[tokio::test]
    async fn followers_copy_markers_and_a_truncated_marker_reopens_its_transaction() {
        let (ls, fs) = (
            Arc::new(MemoryStore::default()),
            Arc::new(MemoryStore::default()),
        );
        let leader = log(&ls);
        leader.set_role(1, true, false);
        leader.append(&txn(&[b"a"], 4, 0), opts()).await.unwrap();
        leader
            .append_marker(4, 0, ControlType::Abort, 2, 0, false)
            .await
            .unwrap();
        // The marker is written but the HW has not passed it: the LSO stays at its start.
        assert_eq!(leader.offsets().last_stable, 0);
        assert_eq!(leader.advance_hw(1), 1);
        assert_eq!(
            leader.offsets().last_stable,
            0,
            "the HW is at the marker, not past it"
        );
        assert_eq!(leader.advance_hw(2), 2);
        assert_eq!(leader.offsets().last_stable, 2);

        let follower = log(&fs);
        follower.set_role(1, false, false);
        let all = leader
            .read(0, 1 << 20, true, ReadUpTo::LogEnd)
            .await
            .unwrap()
            .records;
        assert_eq!(follower.append_replica(&all).await.unwrap(), 2);
        // The follower indexes the abort as the leader did.
        follower.set_role(2, true, true);
        let r = follower
            .read(0, 1 << 20, true, ReadUpTo::LastStable)
            .await
            .unwrap();
        assert_eq!(r.aborted, Some(vec![(4, 0)]));
        // Its marker is fenced against an older coordinator epoch as on the leader.
        assert!(matches!(
            follower
                .append_marker(4, 0, ControlType::Commit, 1, 0, false)
                .await,
            Err(Error::TransactionCoordinatorFenced { .. })
        ));

        // Cut back before the marker: the transaction is open again and its entry is gone.
        follower.set_role(3, false, false);
        follower.truncate_to(1).await.unwrap();
        assert_eq!(follower.open_transactions().await.len(), 1);
        follower.set_role(4, true, true);
        assert_eq!(follower.offsets().last_stable, 0);
        assert_eq!(
            follower
                .read(0, 1 << 20, true, ReadUpTo::LastStable)
                .await
                .unwrap()
                .aborted,
            Some(vec![])
        );
        let reopened = log(&fs);
        assert_eq!(
            reopened.open_transactions().await.len(),
            1,
            "the cut is stored"
        );
        assert!(fs.aborted_txns(1).unwrap().is_empty());
    }
}
