//! The transaction coordinator: the async shell around the state machine of
//! [`super::transactions`]. It routes requests to transactional ids, holds an id *pending*
//! while its transition is written (through the [`GroupLog`] of `__transaction_state`, or
//! straight to the store without one), answers once the write is committed, and then does
//! what the transition says: write the markers of a prepared transaction through a
//! [`MarkerWriter`] and complete it. A timer fences and aborts transactions past their
//! timeout; loading a partition finishes every transaction left prepared by the previous
//! coordinator.
//!
//! All ids sit behind one mutex, as groups do: an operation is a few map updates, and the
//! lock is never held across a write or a marker.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use kafka_protocol::ResponseError;
use tokio::sync::Notify;

use super::transactions::{
    self as txn, EndDecision, InitDecision, InitRequest, Then, Transition, TxnMetadata,
    TxnPartition, TxnState,
};
use super::{Coordinated, GroupLog};
use crate::clock::now_ms;
use crate::error::Result;
use crate::storage::{GroupCf, GroupChange, GroupStore};

/// Settings from Kafka's `transaction.*` keys.
#[derive(Debug, Clone, Copy)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`
    pub timeout_max_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub abort_check_interval: Duration,
    /// `transactional.id.expiration.ms`
    pub id_expiration_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`
    pub id_expiration_check_interval: Duration,
}

/// The markers of one prepared transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markers {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
    pub partitions: Vec<TxnPartition>,
}

/// Writes transaction markers to the leaders of partitions (WriteTxnMarkers), answering
/// per partition.
pub trait MarkerWriter: Send + Sync + 'static {
    fn write(&self, markers: Markers) -> BoxFuture<'static, Vec<(TxnPartition, ResponseError)>>;
}

/// Hands out producer ids, durably reserved.
pub trait ProducerIds: Send + Sync + 'static {
    fn next(&self) -> BoxFuture<'_, Result<i64>>;
}

/// How long a partition whose marker failed with a retriable error waits before the next
/// attempt (Kafka's marker channel retries on its own backoff too).
const MARKER_RETRY: Duration = Duration::from_millis(200);

struct Entry {
    meta: TxnMetadata,
    /// A transition of this id is being written: everything else waits.
    pending: bool,
}

pub struct TxnCoordinator {
    ids: Mutex<HashMap<String, Entry>>,
    store: Arc<dyn GroupStore>,
    log: OnceLock<Arc<dyn GroupLog>>,
    markers: OnceLock<Arc<dyn MarkerWriter>>,
    producer_ids: Arc<dyn ProducerIds>,
    config: TxnConfig,
    /// Ids with a prepared transaction to finish (loaded, or just prepared).
    to_finish: Mutex<BTreeSet<String>>,
    wake: Notify,
    /// The wall clock when this coordinator started and tokio's clock then: times stored
    /// in metadata are wall-clock milliseconds, but they advance with tokio's clock, so
    /// tests of timeouts can pause it.
    started: (i64, tokio::time::Instant),
}

fn changes(meta: &TxnMetadata) -> Vec<GroupChange> {
    vec![GroupChange {
        cf: GroupCf::Transactions,
        key: meta.transactional_id.as_bytes().to_vec(),
        value: Some(txn::encode(meta).to_vec()),
    }]
}

impl TxnCoordinator {
    pub fn new(
        store: Arc<dyn GroupStore>,
        producer_ids: Arc<dyn ProducerIds>,
        config: TxnConfig,
    ) -> TxnCoordinator {
        TxnCoordinator {
            ids: Mutex::new(HashMap::new()),
            store,
            log: OnceLock::new(),
            markers: OnceLock::new(),
            producer_ids,
            config,
            to_finish: Mutex::new(BTreeSet::new()),
            wake: Notify::new(),
            started: (now_ms(), tokio::time::Instant::now()),
        }
    }

    fn now_ms(&self) -> i64 {
        self.started.0 + self.started.1.elapsed().as_millis() as i64
    }

    /// Replicates changes through `log` (set once, when the broker starts its cluster).
    pub fn replicate_through(&self, log: Arc<dyn GroupLog>) {
        let _ = self.log.set(log);
        self.unload(&|_| true);
    }

    /// Where markers go (set once at start).
    pub fn write_markers_through(&self, markers: Arc<dyn MarkerWriter>) {
        let _ = self.markers.set(markers);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn route(&self, id: &str) -> std::result::Result<(), ResponseError> {
        match self.log.get() {
            Some(log) => log.check(id),
            None => Ok(()),
        }
    }

    fn coordinator_epoch(&self, id: &str) -> Option<i32> {
        match self.log.get() {
            Some(log) => log.epoch(id),
            None => Some(0),
        }
    }

    /// A fresh producer id when the decision could need one (a new id or an exhausted
    /// epoch), so the state machine itself stays synchronous.
    async fn spare_producer_id(
        &self,
        current: Option<&TxnMetadata>,
    ) -> std::result::Result<Option<i64>, ResponseError> {
        let needed =
            current.is_none_or(|m| m.state == TxnState::Dead || m.producer_epoch >= txn::EPOCH_MAX);
        if !needed {
            return Ok(None);
        }
        match self.producer_ids.next().await {
            Ok(id) => Ok(Some(id)),
            Err(e) => {
                tracing::error!(error = %e, "cannot allocate a producer id");
                Err(ResponseError::CoordinatorNotAvailable)
            }
        }
    }

    /// Writes `t` for its id (held pending by the caller) and applies it once committed.
    async fn write(&self, t: &Transition) -> std::result::Result<(), ResponseError> {
        let id = t.next.transactional_id.clone();
        let ok = match self.log.get() {
            Some(log) => log.submit(&id, changes(&t.next)).await.unwrap_or(false),
            None => self.store.write_groups(&changes(&t.next)).is_ok(),
        };
        let mut ids = self.lock();
        match ids.get_mut(&id) {
            Some(e) if ok => {
                e.meta = t.next.clone();
                e.pending = false;
            }
            Some(e) => e.pending = false,
            None if ok => {
                ids.insert(
                    id,
                    Entry {
                        meta: t.next.clone(),
                        pending: false,
                    },
                );
            }
            None => {}
        }
        if ok {
            Ok(())
        } else {
            // Kafka answers a failed append to the transaction log with NOT_COORDINATOR:
            // the client looks the coordinator up again.
            Err(ResponseError::NotCoordinator)
        }
    }

    /// Takes `id` pending for a transition decided by `decide` on its current metadata.
    fn begin<T>(
        &self,
        id: &str,
        decide: impl FnOnce(Option<&TxnMetadata>) -> std::result::Result<T, ResponseError>,
        writes: impl Fn(&T) -> bool,
    ) -> std::result::Result<T, ResponseError> {
        self.route(id)?;
        let mut ids = self.lock();
        let current = ids.get(id);
        if current.is_some_and(|e| e.pending) {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let decision = decide(current.map(|e| &e.meta))?;
        if writes(&decision) {
            match ids.get_mut(id) {
                Some(e) => e.pending = true,
                None => {
                    // A placeholder (Dead: unknown) so concurrent inits of a new id wait for
                    // this one.
                    ids.insert(
                        id.to_string(),
                        Entry {
                            meta: blank(id),
                            pending: true,
                        },
                    );
                }
            }
        }
        Ok(decision)
    }

    /// InitProducerId with a transactional id: (producer id, epoch).
    pub async fn init_producer_id(
        self: &Arc<Self>,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> std::result::Result<(i64, i16), ResponseError> {
        self.route(id)?;
        let current = self.lock().get(id).map(|e| e.meta.clone());
        let spare = self.spare_producer_id(current.as_ref()).await?;
        let req = InitRequest {
            timeout_ms,
            expected,
            now_ms: self.now_ms(),
        };
        let max = self.config.timeout_max_ms;
        let decision = self.begin(
            id,
            |cur| {
                let mut spare = spare;
                let mut next_id = || spare.take().unwrap_or(-1);
                let d = txn::init_producer_id(id, cur, req, max, &mut next_id)?;
                // Spare was taken for a state that no longer needs it, or needed and missing:
                // either way the client retries.
                match &d {
                    InitDecision::Write(t) if t.next.producer_id < 0 => {
                        Err(ResponseError::ConcurrentTransactions)
                    }
                    _ => Ok(d),
                }
            },
            |d| matches!(d, InitDecision::Write(_)),
        )?;
        let t = match decision {
            InitDecision::Current { producer_id, epoch } => return Ok((producer_id, epoch)),
            InitDecision::Write(t) => t,
        };
        self.write(&t).await?;
        match t.then {
            Then::RetryAndAbort => {
                self.finish_later(id);
                Err(ResponseError::ConcurrentTransactions)
            }
            _ => Ok((t.next.producer_id, t.next.producer_epoch)),
        }
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn (the group's offsets partition).
    pub async fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
        tv2: bool,
    ) -> std::result::Result<(), ResponseError> {
        let now = self.now_ms();
        let t = self.begin(
            id,
            |cur| {
                let cur = cur
                    .filter(|m| m.state != TxnState::Dead)
                    .ok_or(ResponseError::InvalidProducerIdMapping)?;
                txn::add_partitions(cur, producer_id, epoch, partitions, tv2, now)
            },
            |t| t.is_some(),
        )?;
        match t {
            Some(t) => self.write(&t).await,
            None => Ok(()),
        }
    }

    /// KIP-890 verification: whether each partition is in `id`'s ongoing transaction.
    pub fn verify(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partition: &TxnPartition,
    ) -> std::result::Result<(), ResponseError> {
        self.route(id)?;
        let ids = self.lock();
        let e = ids
            .get(id)
            .filter(|e| e.meta.state != TxnState::Dead)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        e.meta.verify(producer_id, epoch, partition)
    }

    /// EndTxn: (producer id, epoch) to answer (the bumped ones under TV2).
    pub async fn end_txn(
        self: &Arc<Self>,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        tv2: bool,
    ) -> std::result::Result<(i64, i16), ResponseError> {
        let current = self.lock().get(id).map(|e| e.meta.clone());
        let spare = match (tv2, &current) {
            (true, Some(m)) => self.spare_producer_id(Some(m)).await?,
            _ => None,
        };
        let now = self.now_ms();
        let decision = self.begin(
            id,
            |cur| {
                let cur = cur
                    .filter(|m| m.state != TxnState::Dead)
                    .ok_or(ResponseError::InvalidProducerIdMapping)?;
                let mut spare = spare;
                let mut next_id = || spare.take().unwrap_or(-1);
                txn::end_txn(cur, producer_id, epoch, commit, tv2, now, &mut next_id)
            },
            |d| matches!(d, EndDecision::Write(_)),
        )?;
        let t = match decision {
            EndDecision::Done { producer_id, epoch } => return Ok((producer_id, epoch)),
            EndDecision::Write(t) => t,
        };
        self.write(&t).await?;
        self.finish_later(id);
        Ok((t.next.producer_id, t.next.producer_epoch))
    }

    /// Queues `id`'s prepared transaction for its markers and completion.
    fn finish_later(&self, id: &str) {
        self.to_finish
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string());
        self.wake.notify_one();
    }

    /// Runs the timers and the markers until the process ends: finishes prepared
    /// transactions, aborts timed-out ones every `abort_check_interval` and removes
    /// expired ids every `id_expiration_check_interval`.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.config.abort_check_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut expiry = tokio::time::interval(self.config.id_expiration_check_interval);
        expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tick.tick() => self.abort_timed_out().await,
                _ = expiry.tick() => self.remove_expired_ids().await,
            }
            let ids: Vec<String> =
                std::mem::take(&mut *self.to_finish.lock().unwrap_or_else(|e| e.into_inner()))
                    .into_iter()
                    .collect();
            for id in ids {
                tokio::spawn(self.clone().finish(id));
            }
        }
    }

    async fn abort_timed_out(&self) {
        let now = self.now_ms();
        let expired: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, e)| !e.pending && txn::expire(&e.meta, now, &mut || -1).is_some())
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            let current = self.lock().get(&id).map(|e| e.meta.clone());
            let Ok(spare) = self.spare_producer_id(current.as_ref()).await else {
                continue;
            };
            let t = self.begin(
                &id,
                |cur| {
                    let mut spare = spare;
                    let mut next_id = || spare.take().unwrap_or(-1);
                    cur.and_then(|m| txn::expire(m, now, &mut next_id))
                        .filter(|t| t.next.producer_id >= 0)
                        .ok_or(ResponseError::ConcurrentTransactions)
                },
                |_| true,
            );
            let Ok(t) = t else { continue };
            tracing::info!(
                transactional_id = %id,
                producer_id = t.next.producer_id,
                "aborting a transaction past its timeout"
            );
            if self.write(&t).await.is_ok() {
                self.finish_later(&id);
            }
        }
    }

    /// Removes the ids unused for `transactional.id.expiration.ms` with no transaction in
    /// flight: a tombstone in `__transaction_state`, then out of memory (Kafka's
    /// `TransactionStateManager.removeExpiredTransactionalIds`). Their producers start
    /// afresh with InitProducerId; an old producer still writing is refused.
    async fn remove_expired_ids(&self) {
        let now = self.now_ms();
        let expiration = self.config.id_expiration_ms;
        let expired: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, e)| !e.pending && txn::id_expired(&e.meta, now, expiration))
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            let held = self.begin(
                &id,
                |cur| match cur {
                    Some(m) if txn::id_expired(m, now, expiration) => Ok(()),
                    _ => Err(ResponseError::ConcurrentTransactions),
                },
                |_| true,
            );
            if held.is_err() {
                continue;
            }
            let tombstone = vec![GroupChange {
                cf: GroupCf::Transactions,
                key: id.as_bytes().to_vec(),
                value: None,
            }];
            let ok = match self.log.get() {
                Some(log) => log.submit(&id, tombstone).await.unwrap_or(false),
                None => self.store.write_groups(&tombstone).is_ok(),
            };
            let mut ids = self.lock();
            if ok {
                ids.remove(&id);
                tracing::info!(transactional_id = %id, "removed an expired transactional id");
            } else if let Some(e) = ids.get_mut(&id) {
                e.pending = false;
            }
        }
    }

    /// Writes the markers of `id`'s prepared transaction until every partition has it,
    /// then completes the transaction. Gives up when this broker stops coordinating `id`
    /// (the next coordinator finishes it when it loads).
    async fn finish(self: Arc<Self>, id: String) {
        let Some(writer) = self.markers.get().cloned() else {
            return;
        };
        let Some(coordinator_epoch) = self.coordinator_epoch(&id) else {
            return;
        };
        let Some(meta) = self.lock().get(&id).map(|e| e.meta.clone()) else {
            return;
        };
        let commit = match meta.state {
            TxnState::PrepareCommit => true,
            TxnState::PrepareAbort => false,
            _ => return,
        };
        let mut left: Vec<TxnPartition> = meta.partitions.iter().cloned().collect();
        while !left.is_empty() {
            if self.coordinator_epoch(&id) != Some(coordinator_epoch) {
                return;
            }
            let failed = writer
                .write(Markers {
                    producer_id: meta.producer_id,
                    producer_epoch: txn::marker_epoch(&meta),
                    commit,
                    coordinator_epoch,
                    partitions: left.clone(),
                })
                .await;
            left = Vec::new();
            for (p, e) in failed {
                match e {
                    // The partition is gone, or a newer producer or coordinator wrote
                    // past this transaction: nothing more to mark there (as Kafka does).
                    ResponseError::UnknownTopicOrPartition
                    | ResponseError::InvalidProducerEpoch
                    | ResponseError::TransactionCoordinatorFenced => {
                        tracing::warn!(transactional_id = %id, topic = %p.0, partition = p.1, error = ?e, "transaction marker not written; not retrying")
                    }
                    _ => left.push(p),
                }
            }
            if !left.is_empty() {
                tokio::time::sleep(MARKER_RETRY).await;
            }
        }
        let now = self.now_ms();
        let t = self.begin(
            &id,
            |cur| {
                cur.filter(|m| m.producer_id == meta.producer_id && m.state == meta.state)
                    .and_then(|m| txn::complete(m, now))
                    .map(|next| Transition {
                        next,
                        then: Then::Reply,
                    })
                    .ok_or(ResponseError::ConcurrentTransactions)
            },
            |_| true,
        );
        if let Ok(t) = t {
            if let Err(e) = self.write(&t).await {
                tracing::warn!(transactional_id = %id, error = ?e, "completing the transaction not written; the next coordinator finishes it");
            }
        }
    }

    /// Every known transaction (ListTransactions, DescribeTransactions).
    pub fn transactions(&self, wanted: &dyn Fn(&TxnMetadata) -> bool) -> Vec<TxnMetadata> {
        let mut out: Vec<TxnMetadata> = self
            .lock()
            .values()
            .filter(|e| e.meta.state != TxnState::Dead && wanted(&e.meta))
            .map(|e| e.meta.clone())
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }

    /// `id`'s metadata, or the error to answer (DescribeTransactions).
    /// The transactional ids this coordinator holds (those of the `__transaction_state`
    /// partitions it leads), by state; Dead ones are not counted.
    pub fn count_by_state(&self) -> std::collections::BTreeMap<TxnState, i64> {
        let mut out = std::collections::BTreeMap::new();
        for e in self.lock().values() {
            if e.meta.state != TxnState::Dead {
                *out.entry(e.meta.state).or_insert(0) += 1;
            }
        }
        out
    }

    pub fn describe(&self, id: &str) -> std::result::Result<TxnMetadata, ResponseError> {
        self.route(id)?;
        self.lock()
            .get(id)
            .filter(|e| e.meta.state != TxnState::Dead)
            .map(|e| e.meta.clone())
            .ok_or(ResponseError::TransactionalIdNotFound)
    }
}

/// An id's placeholder while its first transition is written: Dead, that is unknown.
fn blank(id: &str) -> TxnMetadata {
    TxnMetadata {
        state: TxnState::Dead,
        ..TxnMetadata::new(id, -1, 0, -1)
    }
}

impl Coordinated for TxnCoordinator {
    fn store(&self) -> &Arc<dyn GroupStore> {
        &self.store
    }

    /// Loads the stored ids `mine` selects; prepared transactions are finished.
    fn load(&self, mine: &dyn Fn(&str) -> bool) -> Result<usize> {
        let mut loaded = HashMap::new();
        for (k, v) in self.store.load_groups(GroupCf::Transactions)? {
            let Ok(id) = String::from_utf8(k) else {
                continue;
            };
            if !mine(&id) {
                continue;
            }
            let meta = txn::decode(&id, &v).ok_or_else(|| {
                crate::error::Error::Storage(format!("transaction metadata of {id} is malformed"))
            })?;
            loaded.insert(id, meta);
        }
        let n = loaded.len();
        let prepared: Vec<String> = loaded
            .values()
            .filter(|m| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|m| m.transactional_id.clone())
            .collect();
        let mut ids = self.lock();
        ids.retain(|id, _| !mine(id));
        ids.extend(loaded.into_iter().map(|(id, meta)| {
            (
                id,
                Entry {
                    meta,
                    pending: false,
                },
            )
        }));
        drop(ids);
        for id in prepared {
            self.finish_later(&id);
        }
        Ok(n)
    }

    fn unload(&self, gone: &dyn Fn(&str) -> bool) {
        self.lock().retain(|id, _| !gone(id));
    }

    fn column_families(&self) -> &'static [GroupCf] {
        &[GroupCf::Transactions]
    }

    fn id_of(&self, _cf: GroupCf, key: &[u8]) -> Option<String> {
        String::from_utf8(key.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStore;
    use std::sync::atomic::{AtomicI64, Ordering};

    struct Counter(AtomicI64);
    impl ProducerIds for Counter {
        fn next(&self) -> BoxFuture<'_, Result<i64>> {
            Box::pin(async move { Ok(self.0.fetch_add(1, Ordering::SeqCst)) })
        }
    }

    /// Records markers; fails each partition named in `flaky` once with a retriable error.
    #[derive(Default)]
    struct Recorder {
        written: Mutex<Vec<Markers>>,
        flaky: Mutex<BTreeSet<TxnPartition>>,
    }
    impl MarkerWriter for Arc<Recorder> {
        fn write(&self, m: Markers) -> BoxFuture<'static, Vec<(TxnPartition, ResponseError)>> {
            let me = self.clone();
            Box::pin(async move {
                let mut flaky = me.flaky.lock().unwrap();
                let failed: Vec<_> = m
                    .partitions
                    .iter()
                    .filter(|p| flaky.remove(*p))
                    .map(|p| (p.clone(), ResponseError::NotLeaderOrFollower))
                    .collect();
                me.written.lock().unwrap().push(m);
                failed
            })
        }
    }

    fn coordinator(store: Arc<MemoryStore>) -> (Arc<TxnCoordinator>, Arc<Recorder>) {
        let c = Arc::new(TxnCoordinator::new(
            store,
            Arc::new(Counter(AtomicI64::new(7000))),
            TxnConfig {
                timeout_max_ms: 900_000,
                abort_check_interval: Duration::from_secs(10),
                id_expiration_ms: 604_800_000,
                id_expiration_check_interval: Duration::from_secs(3600),
            },
        ));
        let rec = Arc::new(Recorder::default());
        c.write_markers_through(Arc::new(rec.clone()));
        tokio::spawn(c.clone().run());
        (c, rec)
    }

    fn tp(t: &str, p: i32) -> TxnPartition {
        (t.to_string(), p)
    }

    async fn settled(c: &TxnCoordinator, id: &str, state: TxnState) -> TxnMetadata {
        for _ in 0..1000 {
            if let Ok(m) = c.describe(id) {
                if m.state == state {
                    return m;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{id} never reached {state:?}: {:?}", c.describe(id));
    }

    #[tokio::test(start_paused = true)]
    async fn a_commit_writes_markers_retries_and_completes_and_survives_a_reload() {
        let store = Arc::new(MemoryStore::default());
        let (c, rec) = coordinator(store.clone());
        let (pid, epoch) = c.init_producer_id("t", 60_000, None).await.unwrap();
        assert_eq!((pid, epoch), (7000, 0));
        c.add_partitions("t", pid, epoch, &[tp("a", 0), tp("b", 1)], false)
            .await
            .unwrap();
        assert_eq!(c.verify("t", pid, epoch, &tp("a", 0)), Ok(()));
        rec.flaky.lock().unwrap().insert(tp("b", 1));
        assert_eq!(
            c.end_txn("t", pid, epoch, true, false).await,
            Ok((pid, epoch))
        );
        let done = settled(&c, "t", TxnState::CompleteCommit).await;
        assert!(done.partitions.is_empty());
        let written = rec.written.lock().unwrap().clone();
        assert_eq!(written.len(), 2, "one retry for the flaky partition");
        assert_eq!(written[0].partitions, vec![tp("a", 0), tp("b", 1)]);
        assert_eq!(written[1].partitions, vec![tp("b", 1)]);
        assert!(written.iter().all(|m| m.commit && m.producer_id == pid));

        // A second producer with the same id fences the first, across a reload too.
        let (c2, _) = coordinator(store.clone());
        c2.load(&|_| true).unwrap();
        assert_eq!(c2.describe("t").unwrap().state, TxnState::CompleteCommit);
        assert_eq!(c2.init_producer_id("t", 60_000, None).await, Ok((pid, 1)));
        assert_eq!(
            c2.add_partitions("t", pid, 0, &[tp("a", 0)], false).await,
            Err(ResponseError::ProducerFenced)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_prepared_transaction_is_finished_by_the_next_coordinator_and_a_late_one_aborted() {
        let store = Arc::new(MemoryStore::default());
        {
            // A coordinator that prepares a commit but never writes its markers.
            let c = Arc::new(TxnCoordinator::new(
                store.clone(),
                Arc::new(Counter(AtomicI64::new(1))),
                TxnConfig {
                    timeout_max_ms: 900_000,
                    abort_check_interval: Duration::from_secs(10),
                    id_expiration_ms: 604_800_000,
                    id_expiration_check_interval: Duration::from_secs(3600),
                },
            ));
            let (pid, e) = c.init_producer_id("p", 60_000, None).await.unwrap();
            c.add_partitions("p", pid, e, &[tp("a", 0)], false)
                .await
                .unwrap();
            c.end_txn("p", pid, e, true, false).await.unwrap();
            assert_eq!(c.describe("p").unwrap().state, TxnState::PrepareCommit);
            let (pid, e) = c.init_producer_id("slow", 1_000, None).await.unwrap();
            c.add_partitions("slow", pid, e, &[tp("b", 0)], false)
                .await
                .unwrap();
        }
        let (c, rec) = coordinator(store);
        c.load(&|_| true).unwrap();
        settled(&c, "p", TxnState::CompleteCommit).await;
        // "slow" outlives its one-second timeout: fenced (epoch + 1) and aborted.
        let aborted = settled(&c, "slow", TxnState::CompleteAbort).await;
        assert_eq!(aborted.producer_epoch, 1);
        let written = rec.written.lock().unwrap().clone();
        assert!(written
            .iter()
            .any(|m| m.commit && m.partitions == vec![tp("a", 0)]));
        assert!(written
            .iter()
            .any(|m| !m.commit && m.partitions == vec![tp("b", 0)] && m.producer_epoch == 1));
        assert_eq!(
            c.end_txn("slow", aborted.producer_id, 0, true, false).await,
            Err(ResponseError::ProducerFenced)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn fencing_an_ongoing_transaction_aborts_it_and_the_retry_succeeds() {
        let store = Arc::new(MemoryStore::default());
        let (c, rec) = coordinator(store);
        let (pid, e) = c.init_producer_id("f", 60_000, None).await.unwrap();
        c.add_partitions("f", pid, e, &[tp("a", 0)], false)
            .await
            .unwrap();
        assert_eq!(
            c.init_producer_id("f", 60_000, None).await,
            Err(ResponseError::ConcurrentTransactions)
        );
        settled(&c, "f", TxnState::CompleteAbort).await;
        assert_eq!(c.init_producer_id("f", 60_000, None).await, Ok((pid, 2)));
        assert!(rec
            .written
            .lock()
            .unwrap()
            .iter()
            .any(|m| !m.commit && m.producer_epoch == 1));
        assert_eq!(
            c.end_txn("nobody", 1, 0, true, false).await,
            Err(ResponseError::InvalidProducerIdMapping)
        );
        assert_eq!(
            c.describe("nobody"),
            Err(ResponseError::TransactionalIdNotFound)
        );
    }
}
