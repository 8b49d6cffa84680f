//! The RocksDB store: one database per log dir, with the column families of DESIGN.md.
//!
//! | CF          | key                                   | value                          |
//! |-------------|---------------------------------------|--------------------------------|
//! | `log`       | partition id (u32 BE) + base offset   | the raw record batch           |
//! | `index`     | same key as `log`                     | last offset delta, max timestamp, size |
//! | `producers` | partition id + producer id (u64 BE)   | idempotence state              |
//! | `meta`      | `m` + caller key / `e` + partition + epoch / `s` + partition / `a` + partition + marker offset | metadata, epoch starts, log start offsets, aborted-transactions index |
//! | `groups`    | group id                              | members, generation, protocol (coordinator's encoding) |
//! | `offsets`   | group + topic + partition (coordinator's encoding) | committed offset |
//! | `consumer_groups` | KIP-848 group / group + member (coordinator's encoding) | epochs, assignments |
//! | `transactions` | transactional id                 | the transaction coordinator's metadata |
//! | `txn_offsets` | group + topic + partition + producer id | an offset pending in a transaction |
//!
//! The `log` CF stores batches as blob files (key/value separation), so compaction moves
//! only small keys around however many partitions interleave. The WAL stays on: a written
//! append survives `kill -9`; `durable` appends also sync it.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Options,
    ReadOptions, WriteBatch, WriteOptions, DB,
};

use super::pinned::pinned_bytes;
use super::{
    batch_key, decode_meta, encode_meta, key_offset, AbortedTxn, Append, BatchMeta, GroupCf,
    GroupChange, GroupStore, LogStore, MetaStore, PartitionId,
};
use crate::error::{Error, Result};

const CF_LOG: &str = "log";
const CF_INDEX: &str = "index";
const CF_PRODUCERS: &str = "producers";
const CF_META: &str = "meta";
const CF_OFFSETS: &str = "offsets";
const CF_GROUPS: &str = "groups";
const CF_CONSUMERS: &str = "consumer_groups";
const CF_TRANSACTIONS: &str = "transactions";
const CF_TXN_OFFSETS: &str = "txn_offsets";
const CF_SHARE_STATE: &str = "share_state";
const CF_SHARE_GROUPS: &str = "share_groups";

pub struct RocksStore {
    db: Arc<DB>,
}

/// Whether files in `dir` open with `O_DIRECT` (tmpfs and some other file systems refuse
/// it, and RocksDB would then fail its first flush); says so in the log when they do not.
fn direct_io_works(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(".direct-io-probe");
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(&probe);
    let _ = std::fs::remove_file(&probe);
    if let Err(e) = &opened {
        tracing::warn!(dir = %dir.display(), error = %e,
            "log.store.direct.writes: the file system refuses direct I/O; writing through the page cache");
    }
    opened.is_ok()
}

fn storage_err(e: rocksdb::Error) -> Error {
    Error::Storage(e.into_string())
}

impl RocksStore {
    /// Opens (creating if needed) the database in `dir`; with `direct_writes`, the files
    /// its flushes and compactions make are written around the page cache.
    pub fn open(dir: &Path, direct_writes: bool) -> Result<RocksStore> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Storage(format!("cannot create {}: {e}", dir.display())))?;
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_compression_type(DBCompressionType::None);
        db_opts.increase_parallelism(2);
        // Bounds how much WAL a restart after kill -9 has to replay.
        db_opts.set_max_total_wal_size(256 << 20);
        db_opts.set_keep_log_file_num(3);
        db_opts.set_enable_pipelined_write(true);
        // A write that waits for another's write group blocks instead of spinning with
        // sched_yield for up to 100 us first: with partitions appended from several threads
        // on few cores, the spinning took CPU from the writes it waited for (bench/run.sh,
        // two runs: broker CPU per GiB produced 3-10 % lower, produce p99 25 % lower).
        db_opts.set_enable_write_thread_adaptive_yield(false);
        // A partition's batches lie one after another in a blob file (a flush writes them
        // in key order), and a consumer catching up reads them in that order: the kernel's
        // readahead serves that, which RocksDB's default advice of random access turns off.
        db_opts.set_advise_random_on_open(false);
        // A flush copies every batch out of the memtable into a blob file: through the page
        // cache, each byte goes into it twice, once for the WAL and once for the blob file.
        // Written with direct I/O (opt-in, `log.store.direct.writes`), it goes once. In
        // alternating runs that took a fifth off the broker's CPU for producing, and added
        // two fifths to reading the data back at once, which then comes from the disk, not
        // the page cache (docs/BENCHMARKS.md).
        let direct_writes = direct_writes && direct_io_works(dir);
        db_opts.set_use_direct_io_for_flush_and_compaction(direct_writes);

        let cache = Cache::new_lru_cache(32 << 20);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);

        let mut log_opts = Options::default();
        log_opts.set_compression_type(DBCompressionType::None);
        log_opts.set_enable_blob_files(true);
        log_opts.set_min_blob_size(4096);
        log_opts.set_blob_compression_type(DBCompressionType::None);
        // No blob GC: it rewrites live blobs out of old blob files during compaction, which
        // for an append-only log is a second copy of everything (a fifth of the broker's CPU
        // on produce in perf). Retention deletes a partition's oldest batches, so a blob file
        // is dropped once the SSTs no longer reference any blob in it.
        log_opts.set_enable_blob_gc(false);
        log_opts.set_write_buffer_size(32 << 20);
        log_opts.set_block_based_table_factory(&table);

        let small = || {
            let mut o = Options::default();
            o.set_compression_type(DBCompressionType::None);
            o.set_write_buffer_size(4 << 20);
            o.set_block_based_table_factory(&table);
            o
        };
        let cfs = vec![
            ColumnFamilyDescriptor::new(CF_LOG, log_opts),
            ColumnFamilyDescriptor::new(CF_INDEX, small()),
            ColumnFamilyDescriptor::new(CF_PRODUCERS, small()),
            ColumnFamilyDescriptor::new(CF_META, small()),
            ColumnFamilyDescriptor::new(CF_OFFSETS, small()),
            ColumnFamilyDescriptor::new(CF_GROUPS, small()),
            ColumnFamilyDescriptor::new(CF_CONSUMERS, small()),
            ColumnFamilyDescriptor::new(CF_TRANSACTIONS, small()),
            ColumnFamilyDescriptor::new(CF_TXN_OFFSETS, small()),
            ColumnFamilyDescriptor::new(CF_SHARE_STATE, small()),
            ColumnFamilyDescriptor::new(CF_SHARE_GROUPS, small()),
        ];
        let db = DB::open_cf_descriptors(&db_opts, dir, cfs).map_err(storage_err)?;
        Ok(RocksStore { db: Arc::new(db) })
    }

    fn cf(&self, name: &str) -> &ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("column family created at open")
    }

    /// Syncs the WAL so everything written so far is durable (used at shutdown).
    pub fn sync(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(storage_err)
    }

    /// The write of `appends`: each batch, its index entry, and the producer, epoch and
    /// aborted-transaction entries that go with it.
    fn append_batch(&self, appends: &[Append]) -> WriteBatch {
        // Sized for its records up front: grown as it filled, the batch's buffer was
        // copied over and over (6 % of the broker's CPU producing, in perf).
        let bytes: usize = appends
            .iter()
            .map(|a| a.batch.len() + APPEND_OVERHEAD)
            .sum();
        let mut wb = WriteBatch::with_capacity_bytes(WRITE_BATCH_HEADER + bytes);
        let (log, index, producers, meta) = (
            self.cf(CF_LOG),
            self.cf(CF_INDEX),
            self.cf(CF_PRODUCERS),
            self.cf(CF_META),
        );
        for a in appends {
            let key = batch_key(a.partition, a.meta.base_offset);
            wb.put_cf(log, key, &a.batch);
            wb.put_cf(index, key, encode_meta(&a.meta));
            if let Some((pid, state)) = &a.producer {
                wb.put_cf(producers, producer_key(a.partition, *pid), state);
            }
            if let Some((epoch, start)) = a.epoch_start {
                wb.put_cf(meta, epoch_key(a.partition, epoch), start.to_be_bytes());
            }
            if let Some(t) = a.aborted {
                wb.put_cf(meta, aborted_key(a.partition, t.last_offset), t.encode());
            }
        }
        wb
    }

    fn write(&self, batch: WriteBatch, durable: bool) -> Result<()> {
        let mut opts = WriteOptions::default();
        opts.set_sync(durable);
        self.db.write_opt(batch, &opts).map_err(storage_err)
    }

    fn partition_bounds(partition: PartitionId) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(batch_key(partition, 0).to_vec());
        ro.set_iterate_upper_bound((partition as u64 + 1).to_be_bytes()[4..].to_vec());
        ro
    }
}

fn epoch_key(partition: PartitionId, epoch: i32) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = b'e';
    k[1..5].copy_from_slice(&partition.to_be_bytes());
    k[5..9].copy_from_slice(&(epoch.max(0) as u32).to_be_bytes());
    k
}

fn start_key(partition: PartitionId) -> [u8; 5] {
    let mut k = [0u8; 5];
    k[0] = b's';
    k[1..5].copy_from_slice(&partition.to_be_bytes());
    k
}

/// The log cleaner's first dirty offset of a partition, in `meta`.
fn cleaned_key(partition: PartitionId) -> [u8; 5] {
    let mut k = start_key(partition);
    k[0] = b'c';
    k
}

/// The aborted-transactions index lives in `meta` under `a` + partition + marker offset, so
/// a partition's entries sort by marker offset and range deletes follow the log's cuts.
fn aborted_key(partition: PartitionId, marker_offset: i64) -> [u8; 13] {
    let mut k = [0u8; 13];
    k[0] = b'a';
    k[1..13].copy_from_slice(&batch_key(partition, marker_offset));
    k
}

fn producer_key(partition: PartitionId, producer_id: i64) -> [u8; 12] {
    batch_key(partition, producer_id)
}

fn meta_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(b'm');
    k.extend_from_slice(key);
    k
}

/// A `WriteBatch`'s header (sequence number and count).
const WRITE_BATCH_HEADER: usize = 12;
/// Most of what one append adds to a `WriteBatch` besides its batch's bytes: the keys, the
/// index, producer, epoch and aborted-transaction records, each with its tag, column family
/// and lengths.
const APPEND_OVERHEAD: usize = 192;

impl LogStore for RocksStore {
    fn append(&self, appends: &[Append], durable: bool) -> Result<()> {
        self.write(self.append_batch(appends), durable)
    }

    fn append_now(&self, appends: &[Append]) -> Result<bool> {
        // RocksDB answers Incomplete, having written nothing, where it would delay or stop
        // the write until its flushes catch up.
        let mut opts = WriteOptions::default();
        opts.set_no_slowdown(true);
        match self.db.write_opt(self.append_batch(appends), &opts) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => Ok(false),
            Err(e) => Err(storage_err(e)),
        }
    }

    /// The batches to read are known from the index, so each is read by its key: one
    /// multi-get, no value read past the budget, and each value stays in the buffer RocksDB
    /// read it into.
    fn read_batches(
        &self,
        partition: PartitionId,
        from_offset: i64,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>> {
        let (mut keys, mut sized) = (Vec::new(), 0usize);
        self.scan_batches(partition, from_offset, &mut |m| {
            let size = m.size as usize;
            if !keys.is_empty() && sized + size > max_bytes {
                return false;
            }
            keys.push(batch_key(partition, m.base_offset));
            sized += size;
            sized < max_bytes
        })?;
        // RocksDB's own block and blob checksums are not checked on this path: every batch
        // carries its CRC-32C, which the leader checked on append and consumers check on
        // receipt (Kafka does not re-check it on fetch either); checking both cost ~5% of
        // a backlog read's CPU.
        let mut ro = ReadOptions::default();
        ro.set_verify_checksums(false);
        let mut out = Vec::with_capacity(keys.len());
        for value in self
            .db
            .batched_multi_get_cf_opt(self.cf(CF_LOG), &keys, true, &ro)
        {
            match value.map_err(storage_err)? {
                Some(v) => out.push(pinned_bytes(&self.db, v)),
                // Removed since the index was read (retention, a truncation): the read ends
                // where the log now does.
                None => break,
            }
        }
        Ok(out)
    }

    fn scan_batches(
        &self,
        partition: PartitionId,
        from_offset: i64,
        f: &mut dyn FnMut(&BatchMeta) -> bool,
    ) -> Result<()> {
        let mut it = self
            .db
            .raw_iterator_cf_opt(self.cf(CF_INDEX), Self::partition_bounds(partition));
        it.seek_for_prev(batch_key(partition, from_offset));
        if !it.valid() {
            it.seek(batch_key(partition, from_offset));
        }
        while it.valid() {
            let (Some(key), Some(value)) = (it.key(), it.value()) else {
                break;
            };
            let base = key_offset(key).unwrap_or(0);
            let meta = decode_meta(base, value).ok_or_else(|| {
                Error::Storage(format!("index entry {partition}/{base} is malformed"))
            })?;
            if meta.last_offset >= from_offset && !f(&meta) {
                break;
            }
            it.next();
        }
        it.status().map_err(storage_err)
    }

    fn last_batch(&self, partition: PartitionId) -> Result<Option<BatchMeta>> {
        let mut it = self
            .db
            .raw_iterator_cf_opt(self.cf(CF_INDEX), Self::partition_bounds(partition));
        it.seek_to_last();
        it.status().map_err(storage_err)?;
        match (it.key(), it.value()) {
            (Some(k), Some(v)) => {
                let base = key_offset(k).unwrap_or(0);
                Ok(Some(decode_meta(base, v).ok_or_else(|| {
                    Error::Storage(format!("index entry {partition}/{base} is malformed"))
                })?))
            }
            _ => Ok(None),
        }
    }

    fn truncate_prefix(&self, partition: PartitionId, log_start: i64) -> Result<()> {
        // Keep the batch that contains log_start: find its base offset.
        let mut keep_from = log_start;
        self.scan_batches(partition, log_start, &mut |m| {
            keep_from = m.base_offset.min(log_start);
            false
        })?;
        let mut wb = WriteBatch::default();
        let (from, to) = (batch_key(partition, 0), batch_key(partition, keep_from));
        wb.delete_range_cf(self.cf(CF_LOG), from, to);
        wb.delete_range_cf(self.cf(CF_INDEX), from, to);
        wb.delete_range_cf(
            self.cf(CF_META),
            aborted_key(partition, 0),
            aborted_key(partition, log_start),
        );
        wb.put_cf(
            self.cf(CF_META),
            start_key(partition),
            log_start.to_be_bytes(),
        );
        self.write(wb, false)
    }

    fn truncate_suffix(
        &self,
        partition: PartitionId,
        end: i64,
        producers: &[(i64, Option<Bytes>)],
    ) -> Result<()> {
        let mut wb = WriteBatch::default();
        let from = batch_key(partition, end.max(0));
        let to = (partition as u64 + 1).to_be_bytes()[4..].to_vec();
        wb.delete_range_cf(self.cf(CF_LOG), &from[..], &to[..]);
        wb.delete_range_cf(self.cf(CF_INDEX), &from[..], &to[..]);
        wb.delete_range_cf(
            self.cf(CF_META),
            aborted_key(partition, end.max(0)),
            aborted_key(partition + 1, 0),
        );
        for (epoch, start) in self.epochs(partition)? {
            if start >= end {
                wb.delete_cf(self.cf(CF_META), epoch_key(partition, epoch));
            }
        }
        for (pid, state) in producers {
            let key = producer_key(partition, *pid);
            match state {
                Some(s) => wb.put_cf(self.cf(CF_PRODUCERS), key, s),
                None => wb.delete_cf(self.cf(CF_PRODUCERS), key),
            }
        }
        self.write(wb, false)
    }

    fn log_start(&self, partition: PartitionId) -> Result<Option<i64>> {
        let v = self
            .db
            .get_cf(self.cf(CF_META), start_key(partition))
            .map_err(storage_err)?;
        Ok(v.and_then(|v| Some(i64::from_be_bytes(v.as_slice().try_into().ok()?))))
    }

    fn replace_batches(
        &self,
        partition: PartitionId,
        rewritten: &[(BatchMeta, Bytes)],
        removed: &[i64],
        unindexed: &[i64],
        cleaned_to: i64,
    ) -> Result<()> {
        let mut wb = WriteBatch::default();
        let (log, index) = (self.cf(CF_LOG), self.cf(CF_INDEX));
        for (meta, batch) in rewritten {
            let key = batch_key(partition, meta.base_offset);
            wb.put_cf(log, key, batch);
            wb.put_cf(index, key, encode_meta(meta));
        }
        for base in removed {
            let key = batch_key(partition, *base);
            wb.delete_cf(log, key);
            wb.delete_cf(index, key);
        }
        for marker in unindexed {
            wb.delete_cf(self.cf(CF_META), aborted_key(partition, *marker));
        }
        wb.put_cf(
            self.cf(CF_META),
            cleaned_key(partition),
            cleaned_to.to_be_bytes(),
        );
        self.write(wb, false)
    }

    fn cleaned_to(&self, partition: PartitionId) -> Result<Option<i64>> {
        let v = self
            .db
            .get_cf(self.cf(CF_META), cleaned_key(partition))
            .map_err(storage_err)?;
        Ok(v.and_then(|v| Some(i64::from_be_bytes(v.as_slice().try_into().ok()?))))
    }

    fn delete_partition(&self, partition: PartitionId) -> Result<()> {
        let mut wb = WriteBatch::default();
        let from = batch_key(partition, 0);
        let to = (partition as u64 + 1).to_be_bytes()[4..].to_vec();
        wb.delete_range_cf(self.cf(CF_LOG), &from[..], &to[..]);
        wb.delete_range_cf(self.cf(CF_INDEX), &from[..], &to[..]);
        wb.delete_range_cf(self.cf(CF_PRODUCERS), &from[..], &to[..]);
        wb.delete_range_cf(
            self.cf(CF_META),
            epoch_key(partition, 0),
            epoch_key(partition + 1, 0),
        );
        wb.delete_range_cf(
            self.cf(CF_META),
            aborted_key(partition, 0),
            aborted_key(partition + 1, 0),
        );
        wb.delete_cf(self.cf(CF_META), start_key(partition));
        wb.delete_cf(self.cf(CF_META), cleaned_key(partition));
        self.write(wb, true)
    }

    fn remove_producers(&self, partition: PartitionId, producers: &[i64]) -> Result<()> {
        let mut wb = WriteBatch::default();
        for pid in producers {
            wb.delete_cf(self.cf(CF_PRODUCERS), producer_key(partition, *pid));
        }
        self.write(wb, false)
    }

    fn producer_states(&self, partition: PartitionId) -> Result<Vec<(i64, Bytes)>> {
        let mut it = self
            .db
            .raw_iterator_cf_opt(self.cf(CF_PRODUCERS), Self::partition_bounds(partition));
        it.seek_to_first();
        let mut out = Vec::new();
        while it.valid() {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                out.push((key_offset(k).unwrap_or(0), Bytes::copy_from_slice(v)));
            }
            it.next();
        }
        it.status().map_err(storage_err)?;
        Ok(out)
    }

    fn epochs(&self, partition: PartitionId) -> Result<Vec<(i32, i64)>> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(epoch_key(partition, 0).to_vec());
        ro.set_iterate_upper_bound(epoch_key(partition + 1, 0).to_vec());
        let mut it = self.db.raw_iterator_cf_opt(self.cf(CF_META), ro);
        it.seek_to_first();
        let mut out = Vec::new();
        while it.valid() {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                let epoch = u32::from_be_bytes(k[5..9].try_into().unwrap_or_default()) as i32;
                let start = i64::from_be_bytes(v.try_into().unwrap_or_default());
                out.push((epoch, start));
            }
            it.next();
        }
        it.status().map_err(storage_err)?;
        Ok(out)
    }

    fn aborted_txns(&self, partition: PartitionId) -> Result<Vec<AbortedTxn>> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(aborted_key(partition, 0).to_vec());
        ro.set_iterate_upper_bound(aborted_key(partition + 1, 0).to_vec());
        let mut it = self.db.raw_iterator_cf_opt(self.cf(CF_META), ro);
        it.seek_to_first();
        let mut out = Vec::new();
        while it.valid() {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                let entry = k
                    .get(1..)
                    .and_then(key_offset)
                    .and_then(|marker| AbortedTxn::decode(marker, v))
                    .ok_or_else(|| {
                        Error::Storage(format!(
                            "aborted-transaction entry of partition {partition} is malformed"
                        ))
                    })?;
                out.push(entry);
            }
            it.next();
        }
        it.status().map_err(storage_err)?;
        Ok(out)
    }
}

impl MetaStore for RocksStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db
            .get_cf(self.cf(CF_META), meta_key(key))
            .map_err(storage_err)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut wb = WriteBatch::default();
        wb.put_cf(self.cf(CF_META), meta_key(key), value);
        self.write(wb, true)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut wb = WriteBatch::default();
        wb.delete_cf(self.cf(CF_META), meta_key(key));
        self.write(wb, true)
    }

    fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let start = meta_key(prefix);
        let mut it = self.db.raw_iterator_cf(self.cf(CF_META));
        it.seek(&start);
        let mut out = Vec::new();
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            if !k.starts_with(&start) {
                break;
            }
            out.push((k[1..].to_vec(), v.to_vec()));
            it.next();
        }
        it.status().map_err(storage_err)?;
        Ok(out)
    }
}

impl RocksStore {
    fn group_cf(&self, cf: GroupCf) -> &ColumnFamily {
        self.cf(match cf {
            GroupCf::Groups => CF_GROUPS,
            GroupCf::Offsets => CF_OFFSETS,
            GroupCf::Consumers => CF_CONSUMERS,
            GroupCf::Transactions => CF_TRANSACTIONS,
            GroupCf::TxnOffsets => CF_TXN_OFFSETS,
            GroupCf::ShareState => CF_SHARE_STATE,
            GroupCf::ShareGroups => CF_SHARE_GROUPS,
        })
    }
}

impl GroupStore for RocksStore {
    fn write_groups(&self, changes: &[GroupChange]) -> Result<()> {
        let mut wb = WriteBatch::default();
        for c in changes {
            match &c.value {
                Some(v) => wb.put_cf(self.group_cf(c.cf), &c.key, v),
                None => wb.delete_cf(self.group_cf(c.cf), &c.key),
            }
        }
        // Written to the WAL (survives kill -9), like acks=1 appends; not fsynced per commit.
        self.write(wb, false)
    }

    fn load_groups(&self, cf: GroupCf) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut it = self.db.raw_iterator_cf(self.group_cf(cf));
        it.seek_to_first();
        let mut out = Vec::new();
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            out.push((k.to_vec(), v.to_vec()));
            it.next();
        }
        it.status().map_err(storage_err)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocks_store_keeps_the_contract() {
        for direct_writes in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let s = RocksStore::open(dir.path(), direct_writes).unwrap();
            super::super::conformance::log_store_contract(&s);
            super::super::conformance::meta_store_contract(&s);
            super::super::conformance::group_store_contract(&s);
        }
    }

    fn blob_append(partition: PartitionId, base_offset: i64, fill: u8) -> Append {
        // Above min_blob_size, so a flush writes it to a blob file.
        let batch = Bytes::from(vec![fill; 10_000]);
        Append {
            partition,
            meta: BatchMeta {
                base_offset,
                last_offset: base_offset,
                max_timestamp: 1,
                size: batch.len() as u32,
            },
            batch,
            producer: None,
            epoch_start: None,
            aborted: None,
        }
    }

    /// Batches flushed to blob files with direct I/O read back whole, before and after a
    /// reopen, beside ones still in the memtable.
    #[test]
    fn batches_flushed_with_direct_writes_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let expected: Vec<Bytes> = (0..20).map(|i| blob_append(1, i, i as u8).batch).collect();
        {
            let s = RocksStore::open(dir.path(), true).unwrap();
            for i in 0..10 {
                s.append(&[blob_append(1, i, i as u8)], false).unwrap();
            }
            s.db.flush_cf(s.cf(CF_LOG)).unwrap();
            s.db.flush_cf(s.cf(CF_INDEX)).unwrap();
            for i in 10..20 {
                s.append(&[blob_append(1, i, i as u8)], false).unwrap();
            }
            assert_eq!(s.read_batches(1, 0, usize::MAX).unwrap(), expected);
        }
        let s = RocksStore::open(dir.path(), true).unwrap();
        assert_eq!(s.read_batches(1, 0, usize::MAX).unwrap(), expected);
        let blob_files = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".blob")
            })
            .count();
        assert!(blob_files > 0, "the flush wrote no blob file");
    }

    #[test]
    fn appends_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = RocksStore::open(dir.path(), false).unwrap();
            let a = Append {
                partition: 3,
                meta: BatchMeta {
                    base_offset: 0,
                    last_offset: 0,
                    max_timestamp: 1,
                    size: 4,
                },
                batch: Bytes::from_static(b"abcd"),
                producer: None,
                epoch_start: Some((0, 0)),
                aborted: None,
            };
            s.append(&[a], false).unwrap();
            s.put(b"k", b"v").unwrap();
        }
        let s = RocksStore::open(dir.path(), false).unwrap();
        assert_eq!(s.last_batch(3).unwrap().unwrap().size, 4);
        assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(s.epochs(3).unwrap(), vec![(0, 0)]);
    }
}
