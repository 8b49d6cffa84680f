//! Narrow storage traits: [`LogStore`] for partition logs and [`MetaStore`] for small
//! metadata records. `rocks.rs` is the only file that names RocksDB; `memory.rs` keeps the same
//! contract in memory for unit tests of the logic above storage.
//!
//! Two words are used precisely in this module's docs:
//! - **written**: visible to every later read and recorded in the write-ahead log, so it
//!   survives the process being killed (`kill -9`), but not necessarily a power loss.
//! - **durable**: written and flushed to the device (fsync), so it survives a power loss too.
//!
//! Invariants every implementation keeps:
//! - An [`Append`] group is written atomically: the batches, the producer states and the
//!   leader-epoch entries it carries are all visible after a crash, or none of them is.
//! - Batches of a partition are keyed by base offset, so reads return them in offset order.
//! - `truncate_prefix` never removes the batch that contains the new log start offset.

pub mod memory;
mod pinned;
pub mod rocks;

use bytes::Bytes;

use crate::error::{Error, Result};

/// A partition's storage id: allocated once when the partition is created and never reused,
/// so a deleted topic's leftovers can never be mistaken for a new topic's data.
pub type PartitionId = u32;

/// What the store keeps about each batch besides its bytes, for scans that should not read
/// the batches themselves (retention, timestamp look-ups, the log end offset at start-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub size: u32,
}

/// One batch to append, with the state that must be written in the same atomic unit.
#[derive(Debug, Clone)]
pub struct Append {
    pub partition: PartitionId,
    pub meta: BatchMeta,
    /// The whole batch with its base offset and leader epoch already stamped.
    pub batch: Bytes,
    /// The producer's new idempotence state, encoded by `log::producer`.
    pub producer: Option<(i64, Bytes)>,
    /// A new leader epoch that starts with this batch: (epoch, start offset).
    pub epoch_start: Option<(i32, i64)>,
    /// An ABORT marker's entry in the aborted-transactions index.
    pub aborted: Option<AbortedTxn>,
}

/// An entry of a partition's aborted-transactions index, as Kafka's `TransactionIndex`
/// keeps it: the producer, the offsets its aborted transaction spans in this partition (the
/// last is the ABORT marker's) and the last stable offset once it was aborted, which lets a
/// reader stop scanning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; 24] {
        let mut v = [0u8; 24];
        v[..8].copy_from_slice(&self.producer_id.to_be_bytes());
        v[8..16].copy_from_slice(&self.first_offset.to_be_bytes());
        v[16..24].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        v
    }

    /// Decodes [`Self::encode`] for the entry whose marker is at `last_offset`.
    pub fn decode(last_offset: i64, v: &[u8]) -> Option<AbortedTxn> {
        if v.len() != 24 {
            return None;
        }
        Some(AbortedTxn {
            producer_id: i64::from_be_bytes(v[..8].try_into().ok()?),
            first_offset: i64::from_be_bytes(v[8..16].try_into().ok()?),
            last_offset,
            last_stable_offset: i64::from_be_bytes(v[16..24].try_into().ok()?),
        })
    }
}

/// Storage of partition logs.
pub trait LogStore: Send + Sync + 'static {
    /// Writes the appends as one atomic unit. On return they are written; with `durable`,
    /// they are durable.
    fn append(&self, appends: &[Append], durable: bool) -> Result<()>;

    /// As [`LogStore::append`] without `durable`, but only if the store can write at once:
    /// `Ok(false)`, with nothing written, where it would first have to wait (a write stall
    /// while its flushes catch up). Cheap enough to call on a runtime thread. A store that
    /// cannot tell says `Ok(false)` always.
    fn append_now(&self, _appends: &[Append]) -> Result<bool> {
        Ok(false)
    }

    /// Returns whole batches in offset order, starting with the batch that contains
    /// `from_offset` (or the first after it), until adding the next batch would pass
    /// `max_bytes`. At least one batch is returned when any exists at or after
    /// `from_offset`. The batches come in the buffers the store read them into (one or
    /// more whole batches each), so a response can reference them without a copy.
    fn read_batches(
        &self,
        partition: PartitionId,
        from_offset: i64,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>>;

    /// As [`LogStore::read_batches`], joined into one buffer (tests, tools).
    fn read(&self, partition: PartitionId, from_offset: i64, max_bytes: usize) -> Result<Bytes> {
        Ok(self
            .read_batches(partition, from_offset, max_bytes)?
            .concat()
            .into())
    }

    /// Calls `f` with the metadata of each batch whose last offset is at or after
    /// `from_offset`, in offset order, until `f` returns false.
    fn scan_batches(
        &self,
        partition: PartitionId,
        from_offset: i64,
        f: &mut dyn FnMut(&BatchMeta) -> bool,
    ) -> Result<()>;

    /// The last batch of the partition, if it has any.
    fn last_batch(&self, partition: PartitionId) -> Result<Option<BatchMeta>>;

    /// Total bytes of the partition's batches at or after `from_offset`.
    fn size_bytes(&self, partition: PartitionId) -> Result<u64> {
        let mut total = 0u64;
        self.scan_batches(partition, 0, &mut |m| {
            total += m.size as u64;
            true
        })?;
        Ok(total)
    }

    /// Moves the log start offset to `log_start` and removes every batch that lies wholly
    /// below it, and every aborted-transaction entry whose marker lies below it, as one
    /// written unit.
    fn truncate_prefix(&self, partition: PartitionId, log_start: i64) -> Result<()>;

    /// Removes every batch at or after `end`, every leader-epoch entry starting at or after
    /// it and every aborted-transaction entry whose marker is at or after it, and replaces
    /// the given producer states (`None` deletes one), as one written unit: a follower
    /// cutting its log back to where it diverges from the leader's.
    fn truncate_suffix(
        &self,
        partition: PartitionId,
        end: i64,
        producers: &[(i64, Option<Bytes>)],
    ) -> Result<()>;

    /// The log start offset last set by `truncate_prefix`, if any.
    fn log_start(&self, partition: PartitionId) -> Result<Option<i64>>;

    /// A log cleaner pass's result as one written unit: each of `rewritten` replaces the
    /// stored batch with the same base offset, each batch at a base offset in `removed`
    /// goes, the aborted-index entries of the markers at `unindexed` go, and `cleaned_to`
    /// (the first offset not yet cleaned) is recorded.
    fn replace_batches(
        &self,
        partition: PartitionId,
        rewritten: &[(BatchMeta, Bytes)],
        removed: &[i64],
        unindexed: &[i64],
        cleaned_to: i64,
    ) -> Result<()>;

    /// The `cleaned_to` last recorded by `replace_batches`, if any.
    fn cleaned_to(&self, partition: PartitionId) -> Result<Option<i64>>;

    /// Removes everything kept for the partition: batches, producer states, epochs, the
    /// aborted-transactions index.
    fn delete_partition(&self, partition: PartitionId) -> Result<()>;

    /// Deletes the states of `producers` (expired ones).
    fn remove_producers(&self, partition: PartitionId, producers: &[i64]) -> Result<()>;

    /// Every producer state of the partition: (producer id, encoded state).
    fn producer_states(&self, partition: PartitionId) -> Result<Vec<(i64, Bytes)>>;

    /// The leader-epoch cache: (epoch, start offset), in epoch order.
    fn epochs(&self, partition: PartitionId) -> Result<Vec<(i32, i64)>>;

    /// The aborted-transactions index, in marker offset order.
    fn aborted_txns(&self, partition: PartitionId) -> Result<Vec<AbortedTxn>>;
}

/// Storage of small metadata records (topics, configs, counters). Every `put` and `delete`
/// is durable on return: metadata changes are rare and must not be lost.
/// Reserves `n` values of a durable counter kept under `key` as a big-endian integer of
/// `WIDTH` bytes (4 or 8), and returns the first. The new end is written before any value
/// is used, so no value is handed out twice, even across crashes, without a write per value
/// (Kafka's ProducerIdManager reserves producer ids in blocks the same way).
pub fn reserve<const WIDTH: usize>(meta: &dyn MetaStore, key: &[u8], n: u64) -> Result<u64> {
    let malformed = || {
        Error::Storage(format!(
            "counter {} is malformed",
            String::from_utf8_lossy(key)
        ))
    };
    let next = match meta.get(key)? {
        Some(v) => {
            let bytes: [u8; WIDTH] = v.as_slice().try_into().map_err(|_| malformed())?;
            bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
        }
        None => 0,
    };
    let end = next
        .checked_add(n)
        .filter(|e| WIDTH >= 8 || *e < 1u64 << (8 * WIDTH))
        .ok_or_else(|| {
            Error::Storage(format!(
                "counter {} exhausted",
                String::from_utf8_lossy(key)
            ))
        })?;
    meta.put(key, &end.to_be_bytes()[8 - WIDTH..])?;
    Ok(next)
}

pub trait MetaStore: Send + Sync + 'static {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// Every record whose key starts with `prefix`, in key order.
    fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
}

/// Which of the group coordinator's column families a [`GroupChange`] lands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupCf {
    /// group id -> the group's members and generation (`groups` CF)
    Groups,
    /// group + topic + partition -> the committed offset (`offsets` CF)
    Offsets,
    /// KIP-848 group -> its epochs, and group + member -> the member's epochs and
    /// partitions (`consumer_groups` CF)
    Consumers,
    /// transactional id -> the transaction coordinator's metadata (`transactions` CF)
    Transactions,
    /// group + topic + partition + producer id -> an offset a transaction committed,
    /// pending until its marker (`txn_offsets` CF)
    TxnOffsets,
    /// group + topic id + partition -> a share partition's persisted state, as the share
    /// coordinator keeps it (`share_state` CF)
    ShareState,
    /// share group id -> its epoch and the topics its members subscribed to
    /// (`share_groups` CF)
    ShareGroups,
}

/// One put (`Some`) or delete (`None`) of the group coordinator's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupChange {
    pub cf: GroupCf,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// The group coordinator's storage: it writes changes atomically and reads everything back
/// at start. Encoding is the coordinator's business; this layer keeps bytes. (With
/// replication, a store that appends the changes to an internal replicated partition and
/// applies them here once committed replaces this one without touching the handlers.)
pub trait GroupStore: Send + Sync + 'static {
    /// Applies the changes as one atomic unit; on return they survive a crash.
    fn write_groups(&self, changes: &[GroupChange]) -> Result<()>;
    /// Every stored record of `cf`, in key order.
    fn load_groups(&self, cf: GroupCf) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
}

/// Big-endian fixed-width key: partition id then offset, so byte order is numeric order.
pub fn batch_key(partition: PartitionId, offset: i64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&partition.to_be_bytes());
    k[4..].copy_from_slice(&(offset.max(0) as u64).to_be_bytes());
    k
}

/// The offset part of a [`batch_key`].
pub fn key_offset(key: &[u8]) -> Option<i64> {
    let b: [u8; 8] = key.get(4..12)?.try_into().ok()?;
    Some(u64::from_be_bytes(b) as i64)
}

/// Encodes the per-batch metadata kept beside each batch.
pub fn encode_meta(m: &BatchMeta) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(&((m.last_offset - m.base_offset) as i32).to_be_bytes());
    v[4..12].copy_from_slice(&m.max_timestamp.to_be_bytes());
    v[12..16].copy_from_slice(&m.size.to_be_bytes());
    v
}

/// Decodes [`encode_meta`]; `None` for a value of the wrong shape.
pub fn decode_meta(base_offset: i64, v: &[u8]) -> Option<BatchMeta> {
    if v.len() != 16 {
        return None;
    }
    let delta = i32::from_be_bytes(v[..4].try_into().ok()?);
    Some(BatchMeta {
        base_offset,
        last_offset: base_offset + delta as i64,
        max_timestamp: i64::from_be_bytes(v[4..12].try_into().ok()?),
        size: u32::from_be_bytes(v[12..16].try_into().ok()?),
    })
}

#[cfg(test)]
pub(crate) mod conformance {
    //! The contract of [`LogStore`], run against every implementation.
    use super::*;

    fn batch(base: i64, n: i64, size: usize) -> Append {
        Append {
            partition: 1,
            meta: BatchMeta {
                base_offset: base,
                last_offset: base + n - 1,
                max_timestamp: 1000 + base,
                size: size as u32,
            },
            batch: Bytes::from(vec![base as u8; size]),
            producer: None,
            epoch_start: None,
            aborted: None,
        }
    }

    fn aborted(first: i64, marker: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: 7,
            first_offset: first,
            last_offset: marker,
            last_stable_offset: marker + 1,
        }
    }

    pub fn log_store_contract(s: &dyn LogStore) {
        assert!(s.last_batch(1).unwrap().is_none());
        assert!(s.read(1, 0, 100).unwrap().is_empty());
        let mut first = batch(0, 3, 10);
        first.producer = Some((9, Bytes::from_static(b"state")));
        first.epoch_start = Some((0, 0));
        s.append(&[first, batch(3, 2, 10)], false).unwrap();
        let mut marker = batch(5, 1, 10);
        marker.aborted = Some(aborted(3, 5));
        let mut marker2 = batch(6, 1, 10);
        marker2.aborted = Some(aborted(6, 6));
        s.append(&[marker, marker2, batch(7, 3, 10)], true).unwrap();
        // Another partition must not leak into partition 1. Written with `append_now`,
        // which writes at once when nothing stalls, as nothing does here.
        let mut other = batch(0, 1, 10);
        other.partition = 2;
        assert!(
            s.append_now(&[other]).unwrap(),
            "the store did not write at once"
        );
        assert_eq!(s.last_batch(2).unwrap().unwrap().last_offset, 0);

        assert_eq!(s.last_batch(1).unwrap().unwrap().last_offset, 9);
        // The batch containing offset 4 starts at 3.
        // (Each test batch is 10 bytes of its base offset; reads join them.)
        let r = s.read(1, 4, 15).unwrap();
        assert_eq!(r.len(), 10, "one batch: two would pass max_bytes");
        assert_eq!(r[0], 3);
        // At least one batch even when it exceeds max_bytes.
        assert_eq!(s.read(1, 0, 1).unwrap().len(), 10);
        let all = s.read(1, 0, 1000).unwrap();
        assert_eq!(all.len(), 50);
        assert_eq!(
            all.chunks(10).map(|c| c[0]).collect::<Vec<_>>(),
            vec![0, 3, 5, 6, 7],
            "in offset order"
        );
        assert!(s.read(1, 10, 1000).unwrap().is_empty());
        // Each piece is whole batches.
        for (from, max) in [(4, 15), (0, 1), (0, 1000), (6, 20)] {
            let pieces = s.read_batches(1, from, max).unwrap();
            assert!(!pieces.is_empty());
            assert!(pieces.iter().all(|p| !p.is_empty() && p.len() % 10 == 0));
        }
        assert_eq!(s.size_bytes(1).unwrap(), 50);

        let mut seen = vec![];
        s.scan_batches(1, 4, &mut |m| {
            seen.push(m.base_offset);
            true
        })
        .unwrap();
        assert_eq!(seen, vec![3, 5, 6, 7]);
        assert_eq!(
            s.aborted_txns(1).unwrap(),
            vec![aborted(3, 5), aborted(6, 6)]
        );
        assert!(s.aborted_txns(2).unwrap().is_empty());

        // A suffix cut takes the aborted entries whose markers it removes.
        s.truncate_suffix(1, 6, &[]).unwrap();
        assert_eq!(s.aborted_txns(1).unwrap(), vec![aborted(3, 5)]);
        assert_eq!(s.last_batch(1).unwrap().unwrap().last_offset, 5);

        assert_eq!(
            s.producer_states(1).unwrap(),
            vec![(9, Bytes::from_static(b"state"))]
        );
        assert_eq!(s.epochs(1).unwrap(), vec![(0, 0)]);

        s.truncate_prefix(1, 4).unwrap();
        assert_eq!(s.log_start(1).unwrap(), Some(4));
        let r = s.read(1, 0, 1000).unwrap();
        assert_eq!(r.len(), 20, "the batch containing the new start stays");
        assert_eq!(r[0], 3);
        assert_eq!(s.aborted_txns(1).unwrap(), vec![aborted(3, 5)]);
        s.truncate_prefix(1, 6).unwrap();
        assert!(s.aborted_txns(1).unwrap().is_empty(), "its marker is gone");
        s.append(
            &[{
                let mut m = batch(6, 1, 10);
                m.aborted = Some(aborted(6, 6));
                m
            }],
            false,
        )
        .unwrap();

        // A cleaner pass, as one write: batch 6 rewritten smaller, batch 7 gone (its range
        // then reads as the next batch's), the first dirty offset recorded.
        s.append(&[batch(7, 3, 10), batch(10, 2, 10)], false)
            .unwrap();
        assert_eq!(s.cleaned_to(1).unwrap(), None);
        let smaller = BatchMeta {
            size: 4,
            ..batch(6, 1, 4).meta
        };
        assert_eq!(s.aborted_txns(1).unwrap(), vec![aborted(6, 6)]);
        s.replace_batches(1, &[(smaller, Bytes::from(vec![66u8; 4]))], &[7], &[6], 10)
            .unwrap();
        assert_eq!(s.cleaned_to(1).unwrap(), Some(10));
        assert!(
            s.aborted_txns(1).unwrap().is_empty(),
            "its index entry went"
        );
        assert_eq!(
            s.read(1, 6, 1000).unwrap().to_vec(),
            [&[66u8; 4][..], &[10u8; 10]].concat()
        );
        assert_eq!(s.read(1, 8, 1000).unwrap().to_vec(), vec![10u8; 10]);
        let mut seen = vec![];
        s.scan_batches(1, 0, &mut |m| {
            seen.push((m.base_offset, m.size));
            true
        })
        .unwrap();
        assert_eq!(seen, vec![(6, 4), (10, 10)]);
        assert_eq!(s.last_batch(1).unwrap().unwrap().last_offset, 11);

        s.delete_partition(1).unwrap();
        assert_eq!(s.cleaned_to(1).unwrap(), None);
        assert!(s.last_batch(1).unwrap().is_none());
        assert!(s.producer_states(1).unwrap().is_empty());
        assert!(s.epochs(1).unwrap().is_empty());
        assert!(s.aborted_txns(1).unwrap().is_empty());
        assert_eq!(s.log_start(1).unwrap(), None);
        assert_eq!(s.last_batch(2).unwrap().unwrap().last_offset, 0);
    }

    pub fn meta_store_contract(s: &dyn MetaStore) {
        s.put(b"t/a", b"1").unwrap();
        s.put(b"t/b", b"2").unwrap();
        s.put(b"u/c", b"3").unwrap();
        assert_eq!(s.get(b"t/a").unwrap().as_deref(), Some(&b"1"[..]));
        let all = s.scan_prefix(b"t/").unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].0, b"t/b");
        s.delete(b"t/a").unwrap();
        assert_eq!(s.get(b"t/a").unwrap(), None);
    }

    pub fn group_store_contract(s: &dyn GroupStore) {
        let put = |cf, k: &[u8], v: &[u8]| GroupChange {
            cf,
            key: k.to_vec(),
            value: Some(v.to_vec()),
        };
        s.write_groups(&[
            put(GroupCf::Groups, b"g2", b"b"),
            put(GroupCf::Groups, b"g1", b"a"),
            put(GroupCf::Offsets, b"g1/t/0", b"42"),
        ])
        .unwrap();
        let groups = s.load_groups(GroupCf::Groups).unwrap();
        assert_eq!(
            groups,
            vec![
                (b"g1".to_vec(), b"a".to_vec()),
                (b"g2".to_vec(), b"b".to_vec())
            ]
        );
        assert_eq!(s.load_groups(GroupCf::Offsets).unwrap().len(), 1);
        s.write_groups(&[GroupChange {
            cf: GroupCf::Groups,
            key: b"g1".to_vec(),
            value: None,
        }])
        .unwrap();
        assert_eq!(s.load_groups(GroupCf::Groups).unwrap().len(), 1);
        assert_eq!(s.load_groups(GroupCf::Offsets).unwrap().len(), 1);
    }
}
