//! Coordinator state in an internal topic, as Kafka keeps it: every change of a group is a
//! record in a partition of `__consumer_offsets`, every change of a transactional id one
//! in `__transaction_state`, every change of a share partition's state one in
//! `__share_group_state`, the partition chosen by the id's hash, and the leader of that
//! partition coordinates the id. One [`CoordinatorPartitions`] serves each topic for its
//! coordinator ([`Coordinated`]).
//!
//! - **Writing.** The coordinator hands its changes to [`CoordinatorPartitions::submit`]; one
//!   writer per led partition appends them (one record per key: the column family tag and
//!   key, the value or a tombstone), waits until the ISR holds them (the HW, as acks=all),
//!   then applies them to the coordinator's local column families and only then answers.
//!   A failed write (leadership lost, too few in sync, timed out) answers false and the
//!   partition's ids are reloaded, so memory never runs ahead of the log.
//! - **Loading.** On becoming leader of a partition a broker waits until its HW covers its
//!   whole log (records an earlier leader wrote are then committed), rebuilds the local
//!   store's state of the partition from the whole log (the latest record of each key; a
//!   key the log no longer holds is dropped), and loads the partition's ids into the
//!   coordinator, as Kafka reloads a partition. Until then requests for those ids get
//!   COORDINATOR_LOAD_IN_PROGRESS; on other brokers, NOT_COORDINATOR (the coordinator asks
//!   [`GroupLog::check`] before serving an id).
//! - **Lease.** A broker whose [`Lease`] lapsed (no heartbeat accepted for the session
//!   timeout) may have been fenced without hearing of it: it answers NOT_COORDINATOR for
//!   every partition until the lease holds again.
//! - **Compaction.** The log cleaner compacts these topics (docs/COMPACTION.md), their
//!   tombstones removed after `delete.retention.ms` as in any compacted topic: a rebuild
//!   needs only the latest record of each live key.
//! - **Release 0.1's data.** A partition with no checkpoint (the metadata store's mark
//!   that its state has gone through the log) whose ids the store holds has its state
//!   written to the log before the first rebuild.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kafka_protocol::ResponseError;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::clock::now_ms;
use crate::controller::metadata::Image;
use crate::coordinator::{Coordinated, GroupLog};
use crate::error::{Error, Result};
use crate::log::batch::BatchHeader;
use crate::log::{AppendOptions, ReadUpTo};
use crate::replication::Lease;
use crate::storage::{GroupCf, GroupChange, MetaStore};
use crate::topics::Topic;

/// How long a write may wait for the ISR (Kafka's `offsets.commit.timeout.ms`).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Queued writes a writer appends as one batch at most.
const MAX_WRITES_PER_BATCH: usize = 256;

pub use crate::coordinator::partition_for;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Led in this leader epoch; its groups are being loaded.
    Loading(i32),
    /// Led in this leader epoch; its groups are in the coordinator, its writer runs.
    Loaded(i32),
}

struct Write {
    changes: Vec<GroupChange>,
    done: oneshot::Sender<bool>,
}

/// The partitions of one internal topic this broker leads, and their writers.
///
/// Lock order: `slots`, then the coordinator's, then `writers` (the coordinator calls
/// [`GroupLog::submit`] under its own lock). `topic` is taken alone.
pub struct CoordinatorPartitions {
    me: i32,
    /// The internal topic: `__consumer_offsets`, `__transaction_state` or
    /// `__share_group_state`.
    name: &'static str,
    coordinator: Arc<dyn Coordinated>,
    meta: Arc<dyn MetaStore>,
    /// Lapsed, this broker may have been fenced and its partitions led elsewhere: it
    /// answers NOT_COORDINATOR for all of them until the lease holds again.
    lease: Arc<Lease>,
    /// The topic's id and partition count as last seen in the image.
    topic: Mutex<Option<(Uuid, usize)>>,
    slots: Mutex<HashMap<i32, Slot>>,
    writers: Mutex<HashMap<i32, mpsc::UnboundedSender<Write>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl CoordinatorPartitions {
    pub fn new(
        me: i32,
        name: &'static str,
        coordinator: Arc<dyn Coordinated>,
        meta: Arc<dyn MetaStore>,
        lease: Arc<Lease>,
    ) -> Self {
        CoordinatorPartitions {
            me,
            name,
            coordinator,
            meta,
            lease,
            topic: Mutex::new(None),
            slots: Mutex::new(HashMap::new()),
            writers: Mutex::new(HashMap::new()),
        }
    }

    fn count(&self) -> Option<usize> {
        lock(&self.topic).map(|(_, n)| n)
    }

    /// Follows the image: starts loading the partitions this broker now leads, unloads the
    /// ones it no longer leads (or leads in a new epoch, which reloads them).
    pub fn follow(self: &Arc<Self>, image: &Image, local: Option<Arc<Topic>>) {
        let state = image
            .names
            .get(self.name)
            .and_then(|id| image.topics.get(id));
        let (Some(t), Some(local)) = (
            state,
            local.filter(|l| Some(&l.id) == image.names.get(self.name)),
        ) else {
            self.unload_all();
            return;
        };
        let seen = Some((t.id, t.partitions.len()));
        if *lock(&self.topic) != seen {
            self.unload_all();
            *lock(&self.topic) = seen;
        }
        let mut slots = lock(&self.slots);
        for (i, ps) in t.partitions.iter().enumerate() {
            let i = i as i32;
            let led = ps.leader == self.me;
            match slots.get(&i) {
                Some(Slot::Loading(e) | Slot::Loaded(e)) if led && *e == ps.leader_epoch => {
                    continue
                }
                Some(_) => {
                    slots.remove(&i);
                    self.unload(i);
                }
                None => {}
            }
            if led && (i as usize) < local.partitions.len() {
                slots.insert(i, Slot::Loading(ps.leader_epoch));
                tokio::spawn(self.clone().load(local.clone(), i, ps.leader_epoch));
            }
        }
    }

    fn unload_all(&self) {
        let mut slots = lock(&self.slots);
        let led: Vec<i32> = slots.drain().map(|(i, _)| i).collect();
        for i in led {
            self.unload(i);
        }
    }

    /// Stops partition `i`'s writer and forgets its groups (under the `slots` lock).
    fn unload(&self, i: i32) {
        lock(&self.writers).remove(&i);
        if let Some(n) = self.count() {
            self.coordinator
                .unload(&|group| partition_for(group, n) == i);
        }
    }

    /// Partition `i`'s slot while the lease holds.
    fn slot(&self, i: i32) -> Option<Slot> {
        let slot = lock(&self.slots).get(&i).copied()?;
        self.lease.holds().then_some(slot)
    }

    fn is(&self, i: i32, slot: Slot) -> bool {
        lock(&self.slots).get(&i) == Some(&slot)
    }

    async fn load(self: Arc<Self>, topic: Arc<Topic>, i: i32, epoch: i32) {
        loop {
            if !self.is(i, Slot::Loading(epoch)) {
                return;
            }
            if let Err(e) = self.replay(&topic, i, epoch).await {
                tracing::warn!(partition = i, error = %e, "loading {} failed; retrying", self.name);
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            {
                let mut slots = lock(&self.slots);
                if slots.get(&i) != Some(&Slot::Loading(epoch)) {
                    return;
                }
                let Some(n) = self.count() else { return };
                match self.coordinator.load(&|group| partition_for(group, n) == i) {
                    Ok(groups) => {
                        // Fifty empty partitions at a first start say nothing worth a line each.
                        if groups > 0 {
                            tracing::info!(
                                partition = i,
                                leader_epoch = epoch,
                                "coordinating the {} ids of {}-{i}",
                                groups,
                                self.name
                            );
                        } else {
                            tracing::debug!(
                                partition = i,
                                leader_epoch = epoch,
                                "coordinating {}-{i}, nothing stored yet",
                                self.name
                            );
                        }
                        let (tx, rx) = mpsc::unbounded_channel();
                        lock(&self.writers).insert(i, tx);
                        slots.insert(i, Slot::Loaded(epoch));
                        tokio::spawn(self.clone().write_loop(topic, i, epoch, rx));
                        return;
                    }
                    // The local store could not be read: stay Loading (clients retry).
                    Err(e) => {
                        tracing::error!(partition = i, error = %e, "cannot load {}; retrying", self.name)
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Rebuilds the local store's state of partition `i` from its whole log, once the HW
    /// covers it, as Kafka reloads a partition: the cleaner removes tombstones once
    /// `delete.retention.ms` has passed, so the records past what this broker applied
    /// before no longer name every delete. The log's latest record of each key is
    /// compared with the store, and the store is made equal to it in one write.
    async fn replay(&self, topic: &Topic, i: i32, epoch: i32) -> Result<()> {
        let p = &topic.partitions[i as usize];
        let target = p.log.offsets().log_end;
        loop {
            let moved = p.log.hw_moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if !self.is(i, Slot::Loading(epoch)) {
                return Err(Error::NotLeaderOrFollower);
            }
            if p.log.offsets().high_watermark >= target {
                break;
            }
            tokio::select! {
                _ = moved => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        let n = topic.partitions.len();
        let stored = self.stored(|id| partition_for(id, n) == i)?;
        let key = checkpoint_key(topic.id, i);
        if self.meta.get(&key)?.is_none() && !stored.is_empty() {
            // Written before these topics held the state (release 0.1 kept it in the
            // store alone): the log gets it first, or the rebuild would drop it.
            let changes: Vec<GroupChange> = stored
                .iter()
                .map(|((cf, k), v)| GroupChange {
                    cf: *cf,
                    key: k.clone(),
                    value: Some(v.clone()),
                })
                .collect();
            tracing::info!(
                partition = i,
                records = changes.len(),
                "writing the stored state of {}-{i} to its log",
                self.name
            );
            self.write(topic, i, epoch, &changes).await?;
        }
        let target = p.log.offsets().log_end;
        let mut latest: BTreeMap<StoredKey, Option<Vec<u8>>> = BTreeMap::new();
        let mut next = p.log.offsets().log_start;
        while next < target {
            let read = p
                .log
                .read(next, 1 << 20, true, ReadUpTo::HighWatermark)
                .await?;
            let mut bytes = read.records;
            if bytes.is_empty() {
                break;
            }
            while !bytes.is_empty() {
                let h = BatchHeader::parse(&bytes)?;
                let set = RecordBatchDecoder::decode(&mut bytes)
                    .map_err(|e| Error::Storage(format!("{}-{i}: {e}", self.name)))?;
                let lo = next;
                for r in set
                    .records
                    .iter()
                    .filter(|r| r.offset >= lo && r.offset < target)
                {
                    let c = decode_change(r).ok_or_else(|| {
                        Error::Storage(format!(
                            "{}-{i}: malformed record at {}",
                            self.name, r.offset
                        ))
                    })?;
                    latest.insert((c.cf, c.key), c.value);
                }
                // Past the whole batch: the cleaner may have left it with fewer records
                // than offsets, or none. (Batches are appended whole: one that starts
                // below the target ends below it.)
                if h.base_offset < target {
                    next = next.max(h.last_offset() + 1);
                }
            }
        }
        let mut changes: Vec<GroupChange> = stored
            .iter()
            .filter(|(k, _)| !matches!(latest.get(*k), Some(Some(_))))
            .map(|((cf, k), _)| GroupChange {
                cf: *cf,
                key: k.clone(),
                value: None,
            })
            .collect();
        changes.extend(latest.into_iter().filter_map(|((cf, key), value)| {
            let value = value?;
            (stored.get(&(cf, key.clone())) != Some(&value)).then_some(GroupChange {
                cf,
                key,
                value: Some(value),
            })
        }));
        if !changes.is_empty() {
            self.coordinator.store().write_groups(&changes)?;
            tracing::info!(
                partition = i,
                changed = changes.len(),
                to = next,
                "applied {}-{i}",
                self.name
            );
        }
        self.meta.put(&key, &next.to_be_bytes())
    }

    /// The local store's records of the ids `mine` selects.
    fn stored(&self, mine: impl Fn(&str) -> bool) -> Result<Stored> {
        let mut out = BTreeMap::new();
        for &cf in self.coordinator.column_families() {
            for (k, v) in self.coordinator.store().load_groups(cf)? {
                if self.coordinator.id_of(cf, &k).is_some_and(|id| mine(&id)) {
                    out.insert((cf, k), v);
                }
            }
        }
        Ok(out)
    }

    async fn write_loop(
        self: Arc<Self>,
        topic: Arc<Topic>,
        i: i32,
        epoch: i32,
        mut rx: mpsc::UnboundedReceiver<Write>,
    ) {
        while let Some(first) = rx.recv().await {
            let mut writes = vec![first];
            while writes.len() < MAX_WRITES_PER_BATCH {
                match rx.try_recv() {
                    Ok(w) => writes.push(w),
                    Err(_) => break,
                }
            }
            let changes: Vec<GroupChange> = writes
                .iter()
                .flat_map(|w| w.changes.iter().cloned())
                .collect();
            let result = self.write(&topic, i, epoch, &changes).await;
            let ok = result.is_ok();
            for w in writes {
                let _ = w.done.send(ok);
            }
            if let Err(e) = result {
                tracing::warn!(partition = i, error = %e, "group state not written; reloading the partition's groups");
                rx.close();
                while let Ok(w) = rx.try_recv() {
                    let _ = w.done.send(false);
                }
                self.restart(topic, i, epoch);
                return;
            }
        }
    }

    /// Appends `changes` as one batch, waits for the ISR, applies them locally.
    async fn write(
        &self,
        topic: &Topic,
        i: i32,
        epoch: i32,
        changes: &[GroupChange],
    ) -> Result<()> {
        let p = &topic.partitions[i as usize];
        let place = p.placement();
        if place.leader != self.me || place.leader_epoch != epoch {
            return Err(Error::NotLeaderOrFollower);
        }
        let min_isr = topic.effective.min_insync_replicas;
        if (place.isr.len() as i32) < min_isr {
            return Err(Error::NotEnoughReplicas {
                isr: place.isr.len(),
                min: min_isr,
            });
        }
        let appended = p
            .log
            .append(
                &encode_changes(changes),
                AppendOptions {
                    max_message_bytes: i32::MAX,
                    durable: false,
                    log_append_time_ms: None,
                },
            )
            .await?;
        let end = appended.base_offset + appended.records as i64;
        super::await_committed(p, self.me, epoch, end, min_isr, WRITE_TIMEOUT).await?;
        self.coordinator.store().write_groups(changes)?;
        self.meta
            .put(&checkpoint_key(topic.id, i), &end.to_be_bytes())
    }

    /// After a failed write: forget the partition's groups and load them again from the log.
    fn restart(self: Arc<Self>, topic: Arc<Topic>, i: i32, epoch: i32) {
        let mut slots = lock(&self.slots);
        if slots.get(&i) == Some(&Slot::Loaded(epoch)) {
            self.unload(i);
            slots.insert(i, Slot::Loading(epoch));
            tokio::spawn(self.clone().load(topic, i, epoch));
        }
    }
}

impl GroupLog for CoordinatorPartitions {
    /// Ok once the id's partition is loaded, COORDINATOR_LOAD_IN_PROGRESS while it
    /// loads, NOT_COORDINATOR when this broker does not lead it.
    fn check(&self, id: &str) -> std::result::Result<(), ResponseError> {
        let Some(n) = self.count() else {
            return Err(ResponseError::NotCoordinator);
        };
        self.check_partition(partition_for(id, n))
    }

    fn partition_of(&self, id: &str) -> Option<i32> {
        self.count().map(|n| partition_for(id, n))
    }

    fn check_partition(&self, partition: i32) -> std::result::Result<(), ResponseError> {
        match self.slot(partition) {
            Some(Slot::Loaded(_)) => Ok(()),
            Some(Slot::Loading(_)) => Err(ResponseError::CoordinatorLoadInProgress),
            None => Err(ResponseError::NotCoordinator),
        }
    }

    fn epoch(&self, id: &str) -> Option<i32> {
        // Not the lease: this says which leadership the id's state belongs to. A transaction
        // coordinator finishing a transaction gives up when it changes, and nothing would
        // finish it on a broker whose lease lapsed without the partition moving.
        let n = self.count()?;
        match lock(&self.slots).get(&partition_for(id, n)).copied() {
            Some(Slot::Loaded(e)) => Some(e),
            _ => None,
        }
    }

    fn loading(&self) -> bool {
        lock(&self.slots)
            .values()
            .any(|s| matches!(s, Slot::Loading(_)))
    }

    fn submit(&self, group_id: &str, changes: Vec<GroupChange>) -> oneshot::Receiver<bool> {
        let (done, rx) = oneshot::channel();
        let writer = self.count().and_then(|n| {
            lock(&self.writers)
                .get(&partition_for(group_id, n))
                .cloned()
        });
        match writer {
            Some(w) => {
                if let Err(mpsc::error::SendError(w)) = w.send(Write { changes, done }) {
                    let _ = w.done.send(false);
                }
            }
            None => {
                let _ = done.send(false);
            }
        }
        rx
    }
}

/// A record of a coordinator's store: its column family and key.
type StoredKey = (GroupCf, Vec<u8>);
/// Stored records and their values.
type Stored = BTreeMap<StoredKey, Vec<u8>>;

/// Metadata-store key of partition `i`'s checkpoint: the log end its state was last
/// written or rebuilt up to, present once that state has gone through the log.
fn checkpoint_key(topic: Uuid, i: i32) -> Vec<u8> {
    let mut k = b"group_log_applied/".to_vec();
    k.extend_from_slice(topic.as_bytes());
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn cf_tag(cf: GroupCf) -> u8 {
    match cf {
        GroupCf::Groups => 0,
        GroupCf::Offsets => 1,
        GroupCf::Consumers => 2,
        GroupCf::Transactions => 3,
        GroupCf::TxnOffsets => 4,
        GroupCf::ShareState => 5,
        GroupCf::ShareGroups => 6,
    }
}

/// One record per change: key = the column family tag, then the key; value = the value,
/// absent for a delete.
fn encode_changes(changes: &[GroupChange]) -> Bytes {
    let now = now_ms();
    let records: Vec<Record> = changes
        .iter()
        .enumerate()
        .map(|(n, c)| {
            let mut key = Vec::with_capacity(1 + c.key.len());
            key.push(cf_tag(c.cf));
            key.extend_from_slice(&c.key);
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: n as i64,
                // the encoder keeps records in one batch while offset - sequence is constant
                sequence: n as i32,
                timestamp: now,
                key: Some(Bytes::from(key)),
                value: c.value.clone().map(Bytes::from),
                headers: Default::default(),
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("group records encode");
    buf.freeze()
}

fn decode_change(r: &Record) -> Option<GroupChange> {
    let key = r.key.as_ref()?;
    let cf = match *key.first()? {
        0 => GroupCf::Groups,
        1 => GroupCf::Offsets,
        2 => GroupCf::Consumers,
        3 => GroupCf::Transactions,
        4 => GroupCf::TxnOffsets,
        5 => GroupCf::ShareState,
        6 => GroupCf::ShareGroups,
        _ => return None,
    };
    Some(GroupChange {
        cf,
        key: key[1..].to_vec(),
        value: r.value.as_ref().map(|v| v.to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_land_where_kafka_puts_them() {
        // Expected values from jshell: Math.abs("my-group".hashCode()) % 50 == 12 (the hash
        // is negative), "console-consumer-1".hashCode() % 50 == 24.
        assert_eq!(partition_for("my-group", 50), 12);
        assert_eq!(partition_for("console-consumer-1", 50), 24);
        assert_eq!(partition_for("", 50), 0);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("group", 1), 0);
    }

    #[test]
    fn changes_survive_the_record_format() {
        let changes = vec![
            GroupChange {
                cf: GroupCf::Groups,
                key: b"g".to_vec(),
                value: Some(b"{}".to_vec()),
            },
            GroupChange {
                cf: GroupCf::Offsets,
                key: b"\0\x01g\0\x01t\0\0\0\x02".to_vec(),
                value: None,
            },
        ];
        let mut bytes = encode_changes(&changes);
        let h = crate::log::batch::validate_produced(&bytes, i32::MAX).unwrap();
        assert_eq!(h.last_offset_delta, 1);
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        assert!(bytes.is_empty(), "one batch");
        let back: Vec<GroupChange> = set
            .records
            .iter()
            .map(|r| decode_change(r).unwrap())
            .collect();
        assert_eq!(back, changes);
    }
}
