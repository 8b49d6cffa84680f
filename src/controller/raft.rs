//! The controller quorum's storage for openraft: the Raft log and vote in a RocksDB of their
//! own (`<first log dir>/__cluster_metadata`), every write synced before it is acknowledged
//! (the quorum's safety rests on it), and the state machine that applies committed
//! [`Record`]s to the metadata [`Image`], with the image as its snapshot.

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use rocksdb::{ColumnFamilyDescriptor, Options, WriteBatch, WriteOptions, DB};
use serde::{Deserialize, Serialize};

use super::metadata::{Image, Record};

openraft::declare_raft_types!(
    /// Cairn's Raft types: one decision's metadata records per entry (committed together),
    /// nothing out, u64 node ids.
    pub TypeConfig:
        D = Vec<Record>,
        R = (),
);

pub type NodeId = u64;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

const LOGS: &str = "raft_logs";
const STATE: &str = "raft_state";
const VOTE_KEY: &[u8] = b"vote";
const COMMITTED_KEY: &[u8] = b"committed";
const PURGED_KEY: &[u8] = b"last_purged";
const SNAPSHOT_KEY: &[u8] = b"snapshot";

fn io_error(e: impl std::fmt::Display) -> AnyError {
    AnyError::error(e.to_string())
}

fn synced() -> WriteOptions {
    let mut o = WriteOptions::default();
    o.set_sync(true);
    o
}

/// Opens (creating if needed) the quorum's RocksDB at `path`.
pub fn open_db(path: &Path) -> Result<Arc<DB>, rocksdb::Error> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let cfs = [LOGS, STATE].map(|n| ColumnFamilyDescriptor::new(n, Options::default()));
    Ok(Arc::new(DB::open_cf_descriptors(&opts, path, cfs)?))
}

/// The Raft log and vote. Cloned handles share the database (openraft reads through one).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
}

impl LogStore {
    pub fn new(db: Arc<DB>) -> LogStore {
        LogStore { db }
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("column family created at open")
    }

    fn get<T: for<'de> Deserialize<'de>>(&self, key: &[u8]) -> Result<Option<T>, AnyError> {
        match self.db.get_cf(self.cf(STATE), key).map_err(io_error)? {
            Some(v) => serde_json::from_slice(&v).map(Some).map_err(io_error),
            None => Ok(None),
        }
    }

    fn put<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), AnyError> {
        let v = serde_json::to_vec(value).map_err(io_error)?;
        self.db
            .put_cf_opt(self.cf(STATE), key, v, &synced())
            .map_err(io_error)
    }

    fn last_entry(&self) -> Result<Option<Entry<TypeConfig>>, AnyError> {
        let mut it = self.db.raw_iterator_cf(self.cf(LOGS));
        it.seek_to_last();
        match it.value() {
            Some(v) => serde_json::from_slice(v).map(Some).map_err(io_error),
            None => it.status().map(|_| None).map_err(io_error),
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s + 1,
            Bound::Unbounded => 0,
        };
        let mut out = Vec::new();
        let mut it = self.db.raw_iterator_cf(self.cf(LOGS));
        it.seek(start.to_be_bytes());
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            let index = u64::from_be_bytes(k.try_into().map_err(|_| {
                StorageIOError::read_logs(AnyError::error("malformed raft log key"))
            })?);
            if !range.contains(&index) {
                break;
            }
            out.push(
                serde_json::from_slice(v).map_err(|e| StorageIOError::read_logs(io_error(e)))?,
            );
            it.next();
        }
        it.status()
            .map_err(|e| StorageIOError::read_logs(io_error(e)))?;
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let purged: Option<LogId<NodeId>> =
            self.get(PURGED_KEY).map_err(StorageIOError::read_logs)?;
        let last = self
            .last_entry()
            .map_err(StorageIOError::read_logs)?
            .map(|e| e.log_id)
            .or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        self.put(VOTE_KEY, vote)
            .map_err(|e| StorageIOError::write_vote(e).into())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        self.get(VOTE_KEY)
            .map_err(|e| StorageIOError::read_vote(e).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        self.put(COMMITTED_KEY, &committed)
            .map_err(|e| StorageIOError::write(e).into())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(self
            .get::<Option<LogId<NodeId>>>(COMMITTED_KEY)
            .map_err(StorageIOError::read)?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::default();
        for e in entries {
            let v = serde_json::to_vec(&e).map_err(|e| StorageIOError::write_logs(io_error(e)))?;
            batch.put_cf(self.cf(LOGS), e.log_id.index.to_be_bytes(), v);
        }
        let result = self.db.write_opt(batch, &synced());
        let io = result
            .as_ref()
            .map(|_| ())
            .map_err(|e| std::io::Error::other(e.to_string()));
        callback.log_io_completed(io);
        result.map_err(|e| StorageIOError::write_logs(io_error(e)).into())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(
            self.cf(LOGS),
            log_id.index.to_be_bytes(),
            u64::MAX.to_be_bytes(),
        );
        // delete_range's end is exclusive: the last possible index goes explicitly.
        batch.delete_cf(self.cf(LOGS), u64::MAX.to_be_bytes());
        self.db
            .write_opt(batch, &synced())
            .map_err(|e| StorageIOError::write_logs(io_error(e)).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        // The purge point is recorded first: a crash in between leaves extra entries, not a hole.
        self.put(PURGED_KEY, &log_id)
            .map_err(StorageIOError::write_logs)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(
            self.cf(LOGS),
            0u64.to_be_bytes(),
            (log_id.index + 1).to_be_bytes(),
        );
        self.db
            .write_opt(batch, &synced())
            .map_err(|e| StorageIOError::write_logs(io_error(e)).into())
    }
}

/// A snapshot as stored: its meta and the serialized image.
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    data: Vec<u8>,
}

/// Applies committed records to the metadata image. The image is rebuilt at start from the
/// last snapshot (kept in the same database) plus the log openraft replays after it.
pub struct StateMachine {
    db: Arc<DB>,
    pub image: Image,
    /// The image after every applied batch, in log order, for whoever follows metadata.
    published: tokio::sync::watch::Sender<Arc<Image>>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, openraft::BasicNode>,
    snapshots_built: u64,
}

impl StateMachine {
    pub fn open(db: Arc<DB>) -> Result<StateMachine, AnyError> {
        let store = LogStore::new(db.clone());
        let snapshot: Option<StoredSnapshot> = store.get(SNAPSHOT_KEY)?;
        let mut sm = StateMachine {
            db,
            image: Image::new(),
            published: tokio::sync::watch::channel(Arc::new(Image::new())).0,
            last_applied: None,
            membership: StoredMembership::default(),
            snapshots_built: 0,
        };
        if let Some(s) = snapshot {
            sm.image = serde_json::from_slice(&s.data).map_err(io_error)?;
            sm.last_applied = s.meta.last_log_id;
            sm.membership = s.meta.last_membership;
        }
        sm.publish();
        Ok(sm)
    }

    /// The applied image now and after each change (in log order).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Arc<Image>> {
        self.published.subscribe()
    }

    fn publish(&self) {
        self.published.send_replace(Arc::new(self.image.clone()));
    }

    /// Keeps `s` as the snapshot served to lagging voters and loaded at the next start.
    fn save_snapshot(db: &Arc<DB>, s: &StoredSnapshot) -> Result<(), AnyError> {
        LogStore::new(db.clone()).put(SNAPSHOT_KEY, s)
    }

    fn snapshot_of(s: &StoredSnapshot) -> Snapshot<TypeConfig> {
        Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        }
    }
}

/// Builds a snapshot from a copy of the image taken when it was asked for.
pub struct SnapshotBuilder {
    db: Arc<DB>,
    image: Image,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, openraft::BasicNode>,
    id: String,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let data = serde_json::to_vec(&self.image)
            .map_err(|e| StorageIOError::write_snapshot(None, io_error(e)))?;
        let stored = StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
                snapshot_id: self.id.clone(),
            },
            data,
        };
        StateMachine::save_snapshot(&self.db, &stored)
            .map_err(|e| StorageIOError::write_snapshot(Some(stored.meta.signature()), e))?;
        Ok(StateMachine::snapshot_of(&stored))
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(
        Option<LogId<NodeId>>,
        StoredMembership<NodeId, openraft::BasicNode>,
    )> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<()>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        for e in entries {
            self.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(records) => {
                    for record in &records {
                        self.image.apply(e.log_id.index as i64, record);
                    }
                }
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(e.log_id), m);
                }
            }
            out.push(());
        }
        self.publish();
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshots_built += 1;
        let last = self.last_applied.map_or(0, |l| l.index);
        SnapshotBuilder {
            db: self.db.clone(),
            image: self.image.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            id: format!("{last}-{}", self.snapshots_built),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        let image: Image = serde_json::from_slice(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), io_error(e)))?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        StateMachine::save_snapshot(&self.db, &stored)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), e))?;
        self.image = image;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.publish();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let store = LogStore::new(self.db.clone());
        let stored: Option<StoredSnapshot> = store
            .get(SNAPSHOT_KEY)
            .map_err(|e| StorageIOError::read_snapshot(None, e))?;
        Ok(stored.as_ref().map(StateMachine::snapshot_of))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::{StoreBuilder, Suite};

    struct Builder;

    impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
        async fn build(&self) -> StorageResult<(tempfile::TempDir, LogStore, StateMachine)> {
            let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(io_error(e)))?;
            let db = open_db(dir.path()).map_err(|e| StorageIOError::write(io_error(e)))?;
            let sm = StateMachine::open(db.clone()).map_err(StorageIOError::read)?;
            Ok((dir, LogStore::new(db), sm))
        }
    }

    /// openraft's own conformance suite for log stores and state machines.
    #[test]
    fn openraft_storage_suite() {
        Suite::test_all(Builder).unwrap();
    }

    /// Vote, log and snapshot survive closing and reopening the database.
    #[tokio::test]
    async fn state_survives_reopen() {
        use openraft::{CommittedLeaderId, Membership};
        let dir = tempfile::tempdir().unwrap();
        let id = |term, index| LogId::new(CommittedLeaderId::new(term, 1), index);
        {
            let db = open_db(dir.path()).unwrap();
            let mut log = LogStore::new(db.clone());
            log.save_vote(&Vote::new(3, 1)).await.unwrap();
            let entries = vec![
                Entry::<TypeConfig> {
                    log_id: id(3, 1),
                    payload: EntryPayload::Membership(Membership::new(
                        vec![[1u64].into_iter().collect()],
                        None,
                    )),
                },
                Entry {
                    log_id: id(3, 2),
                    payload: EntryPayload::Normal(vec![Record::Topic {
                        name: "t".into(),
                        id: uuid::Uuid::new_v4(),
                        configs: Default::default(),
                    }]),
                },
            ];
            let mut sm = StateMachine::open(db.clone()).unwrap();
            sm.apply(entries.clone()).await.unwrap();
            let mut b = sm.get_snapshot_builder().await;
            b.build_snapshot().await.unwrap();
            let mut batch = WriteBatch::default();
            for e in &entries {
                batch.put_cf(
                    log.cf(LOGS),
                    e.log_id.index.to_be_bytes(),
                    serde_json::to_vec(e).unwrap(),
                );
            }
            db.write_opt(batch, &synced()).unwrap();
            log.save_committed(Some(id(3, 2))).await.unwrap();
        }
        let db = open_db(dir.path()).unwrap();
        let mut log = LogStore::new(db.clone());
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
        assert_eq!(log.read_committed().await.unwrap(), Some(id(3, 2)));
        assert_eq!(
            log.get_log_state().await.unwrap().last_log_id,
            Some(id(3, 2))
        );
        let mut sm = StateMachine::open(db).unwrap();
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(applied, Some(id(3, 2)));
        assert!(sm.image.names.contains_key("t"));
    }
}
