//! Share groups' records on a partition's leader (Kafka's `SharePartitionManager`): the
//! [`partition::SharePartition`] of every (share group, topic partition) this broker
//! leads, and the share sessions of the members that fetch from it.
//!
//! A share session (KIP-932) is one per group member on this broker: ShareFetch with epoch 0
//! opens it with a set of partitions, later ShareFetch requests add or forget partitions
//! and must carry the session's next epoch, and epoch -1 (or the connection closing) ends
//! it, giving back every record the member still holds. Every successful ShareFetch or
//! ShareAcknowledge moves the epoch on by one.
//!
//! Handlers read the log themselves and hand the batches' offsets to [`Shares::acquire`]:
//! all state changes happen under one mutex, each a few map updates, so two members that
//! read the same batches concurrently are each given different records.
//!
//! What a share partition has decided is persisted through a [`Persister`] (the share
//! coordinator of `__share_group_state`, on this broker or another) as Kafka persists it:
//! a broker that comes to lead the partition (after a restart, a failover) reads it back
//! before serving it, in its leader epoch, which fences the previous leader's writes. An
//! acknowledgement is answered once its state is written; records given back by a closed
//! session or an expired lock are written behind. Locks are not persisted: records
//! acquired when the leader changed are available again, with their delivery counts.

pub mod partition;

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use futures_util::future::BoxFuture;
use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use uuid::Uuid;

use partition::{AckError, Acquired, Limits, SharePartition, Snapshot};

/// A topic partition by topic id, as share requests name them.
pub type TopicIdPartition = (Uuid, i32);

/// `group.share.max.share.sessions`: share sessions a broker keeps.
pub const SESSIONS_MAX: usize = 2000;

/// The connection a session was opened on: it ends when that connection closes.
pub type ConnKey = (Arc<str>, SocketAddr);

struct Session {
    /// The epoch the member's next request must carry.
    next_epoch: i32,
    partitions: BTreeSet<TopicIdPartition>,
    conn: ConnKey,
}

/// Where share partitions' state is kept (Kafka's `Persister`): the share coordinator of
/// each, on this broker or another.
pub trait Persister: Send + Sync + 'static {
    /// `group`'s state of `tp`, read by its leader in `leader_epoch` (a newer epoch fences
    /// the previous leader), with its state epoch; None when never written or started
    /// afresh without a start offset (state epoch 0 when never written).
    fn read(
        &self,
        group: &str,
        tp: TopicIdPartition,
        leader_epoch: i32,
    ) -> BoxFuture<'static, Result<(Option<Snapshot>, i32), ResponseError>>;
    /// Writes the whole state of `group` on `tp`, as read in `state_epoch`;
    /// FENCED_LEADER_EPOCH once a newer leader has read it, FENCED_STATE_EPOCH once the
    /// state was started afresh.
    fn write(
        &self,
        group: &str,
        tp: TopicIdPartition,
        leader_epoch: i32,
        state_epoch: i32,
        state: Snapshot,
    ) -> BoxFuture<'static, Result<(), ResponseError>>;
    /// Starts `group`'s state of `tp` afresh at `start` (-1: none, so the next leader to
    /// read it starts where `share.auto.offset.reset` says) in a new state epoch, which
    /// fences the writes of a leader that read the old state (AlterShareGroupOffsets,
    /// DeleteShareGroupOffsets).
    fn initialize(
        &self,
        group: &str,
        tp: TopicIdPartition,
        start: i64,
    ) -> BoxFuture<'static, Result<(), ResponseError>>;
    /// `group`'s share partition `tp` in brief, as persisted (ReadShareGroupStateSummary);
    /// None when never written or without a start offset.
    fn summary(
        &self,
        group: &str,
        tp: TopicIdPartition,
    ) -> BoxFuture<'static, Result<Option<Summary>, ResponseError>>;
    /// Removes `group`'s state of each of `tps` (those with none are skipped).
    fn delete(
        &self,
        group: &str,
        tps: Vec<TopicIdPartition>,
    ) -> BoxFuture<'static, Result<(), ResponseError>>;
}

/// A share partition's state in brief (DescribeShareGroupOffsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The share-partition start offset.
    pub start: i64,
    /// The leader epoch that wrote the state.
    pub leader_epoch: i32,
    /// Records at or past `start` whose delivery is complete; -1 when unknown.
    pub delivery_complete: i32,
}

impl Summary {
    /// Share-partition lag (KIP-1226) against the partition's high watermark `hw`: the
    /// records from the start offset on whose delivery is not complete; -1 when unknown.
    pub fn lag(&self, hw: i64) -> i64 {
        if self.start < 0 || self.delivery_complete < 0 {
            return -1;
        }
        (hw - self.start - self.delivery_complete as i64).max(0)
    }
}

struct Entry {
    sp: SharePartition,
    /// The partition's leader epoch when this broker read the state.
    leader_epoch: i32,
    /// The state epoch of the state read (its writes carry it).
    state_epoch: i32,
    /// What the share coordinator holds (as last written or read).
    persisted: Snapshot,
    /// Taken while the state is written: writes go one at a time, newest state each.
    writer: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct Inner {
    partitions: HashMap<(String, Uuid, i32), Entry>,
    sessions: HashMap<(String, String), Session>,
    /// Counters per (group, topic id), for metrics; kept while this broker runs (a share
    /// partition unloaded and loaded again counts on).
    stats: HashMap<(String, Uuid), ShareStats>,
}

/// What happened to a group's records of one topic on this broker (metrics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareStats {
    /// Records acknowledged, by type: ACCEPT, RELEASE, REJECT, RENEW.
    pub accepted: u64,
    pub released: u64,
    pub rejected: u64,
    pub renewed: u64,
    /// Records acquired again (a delivery count above 1).
    pub redelivered: u64,
    /// Records whose acquisition lock ran out.
    pub lock_timeouts: u64,
}

/// One share partition's records now (metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGauges {
    pub group: String,
    pub tp: TopicIdPartition,
    pub in_flight: usize,
    pub acquired: usize,
}

#[derive(Default)]
pub struct Shares {
    inner: Mutex<Inner>,
    persister: OnceLock<Arc<dyn Persister>>,
    /// Woken whenever records may have become available again (released, expired) so
    /// long-polling share fetches look again.
    pub released: Notify,
}

/// What a ShareFetch or ShareAcknowledge did to its share session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStep {
    /// Epoch 0: a new session with these partitions.
    Open,
    /// The next epoch: the session carries on.
    Continue,
    /// Epoch -1: the session ends once the request's acknowledgements are applied.
    Close,
}

impl Shares {
    /// Persists share partitions through `persister` (set once, when the broker starts its
    /// cluster; without one, state is in memory only).
    pub fn persist_through(&self, persister: Arc<dyn Persister>) {
        let _ = self.persister.set(persister);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic under this mutex leaves maps that are still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks a request's session epoch and updates the session: partitions added by the
    /// request, `forgotten` ones removed. Errors
    /// are Kafka's: SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
    /// SHARE_SESSION_LIMIT_REACHED.
    pub fn session(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        added: &[TopicIdPartition],
        forgotten: &[TopicIdPartition],
        conn: &ConnKey,
    ) -> Result<SessionStep, (ResponseError, String)> {
        let mut inner = self.lock();
        let key = (group.to_string(), member.to_string());
        match epoch {
            0 => {
                if !inner.sessions.contains_key(&key) && inner.sessions.len() >= SESSIONS_MAX {
                    return Err((
                        ResponseError::ShareSessionLimitReached,
                        "The share session cache is full.".into(),
                    ));
                }
                // A new session replaces the member's old one. The records the member holds
                // stay its own (a client opens a new session after an error while records
                // it fetched are still in its buffer): their locks end them otherwise.
                inner.sessions.remove(&key);
                inner.sessions.insert(
                    key,
                    Session {
                        next_epoch: 1,
                        partitions: added.iter().copied().collect(),
                        conn: conn.clone(),
                    },
                );
                Ok(SessionStep::Open)
            }
            -1 => match inner.sessions.get(&key) {
                Some(_) => Ok(SessionStep::Close),
                None => Err(not_found(member)),
            },
            e => {
                let Some(s) = inner.sessions.get_mut(&key) else {
                    return Err(not_found(member));
                };
                if s.next_epoch != e {
                    return Err((
                        ResponseError::InvalidShareSessionEpoch,
                        format!(
                            "The share session epoch {e} is not the expected {}.",
                            s.next_epoch
                        ),
                    ));
                }
                s.next_epoch = if e == i32::MAX { 1 } else { e + 1 };
                s.partitions.extend(added.iter().copied());
                // A forgotten partition is only left out of the member's next fetches (the
                // Java client forgets one while it still has records of it to deliver):
                // what the member holds there stays its own, as in Kafka.
                for tp in forgotten {
                    s.partitions.remove(tp);
                }
                Ok(SessionStep::Continue)
            }
        }
    }

    /// The partitions of a member's session.
    pub fn session_partitions(&self, group: &str, member: &str) -> Vec<TopicIdPartition> {
        let inner = self.lock();
        inner
            .sessions
            .get(&(group.to_string(), member.to_string()))
            .map(|s| s.partitions.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Ends a member's session: every record it holds goes back.
    pub fn close_session(self: &Arc<Self>, group: &str, member: &str) {
        tracing::debug!(group, member, "share session closed");
        let mut inner = self.lock();
        inner
            .sessions
            .remove(&(group.to_string(), member.to_string()));
        let changed = release_member(&mut inner, group, member);
        drop(inner);
        self.released_by(changed);
        self.unload_if_idle(group.to_string());
    }

    /// A connection closed: the sessions opened on it end.
    pub fn connection_closed(self: &Arc<Self>, conn: &ConnKey) {
        let mut inner = self.lock();
        let gone: Vec<(String, String)> = inner
            .sessions
            .iter()
            .filter(|(_, s)| &s.conn == conn)
            .map(|(k, _)| k.clone())
            .collect();
        let mut changed = Vec::new();
        for (group, member) in &gone {
            tracing::debug!(group, member, "share session's connection closed");
            inner.sessions.remove(&(group.clone(), member.clone()));
            changed.extend(release_member(&mut inner, group, member));
        }
        drop(inner);
        self.released_by(changed);
        let groups: BTreeSet<String> = gone.into_iter().map(|(g, _)| g).collect();
        for group in groups {
            self.unload_if_idle(group);
        }
    }

    /// Once `group` has no session here, its share partitions are written and dropped
    /// from memory: nobody holds their records, and the next member to fetch reads them
    /// back, as changed meanwhile (AlterShareGroupOffsets needs the group empty) or not.
    /// Kept in memory only when there is nowhere to persist them.
    fn unload_if_idle(self: &Arc<Self>, group: String) {
        if self.persister.get().is_none() || self.has_sessions(&group) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let tps: Vec<TopicIdPartition> = me
                .lock()
                .partitions
                .keys()
                .filter(|(g, _, _)| *g == group)
                .map(|(_, t, p)| (*t, *p))
                .collect();
            for tp in tps {
                // A failed write drops the share partition already.
                let _ = me.persist(&group, tp).await;
                let mut inner = me.lock();
                if inner.sessions.keys().any(|(g, _)| *g == group) {
                    return;
                }
                let key = (group.clone(), tp.0, tp.1);
                let idle = inner
                    .partitions
                    .get(&key)
                    .is_some_and(|e| e.sp.acquired() == 0 && e.sp.snapshot() == e.persisted);
                if idle {
                    tracing::debug!(group, topic_id = %tp.0, partition = tp.1, "idle share partition unloaded");
                    inner.partitions.remove(&key);
                }
            }
        });
    }

    fn has_sessions(&self, group: &str) -> bool {
        self.lock().sessions.keys().any(|(g, _)| g == group)
    }

    /// Starts `group`'s share partitions afresh: each of `starts` at its offset, or (-1)
    /// where `share.auto.offset.reset` will say (AlterShareGroupOffsets,
    /// DeleteShareGroupOffsets, on an empty group). What this broker holds of them is
    /// dropped; a leader elsewhere that still holds one is fenced by the new state epoch
    /// on its next write and reads the new state.
    pub async fn start_afresh(
        &self,
        group: &str,
        starts: &[(TopicIdPartition, i64)],
    ) -> Vec<Result<(), ResponseError>> {
        {
            let mut inner = self.lock();
            for (tp, _) in starts {
                inner.partitions.remove(&(group.to_string(), tp.0, tp.1));
            }
        }
        let mut results = Vec::with_capacity(starts.len());
        for &(tp, start) in starts {
            results.push(match self.persister.get() {
                Some(p) => p.initialize(group, tp, start).await,
                None => Ok(()),
            });
        }
        results
    }

    /// Records went back on `changed` share partitions: fetches look again, and the
    /// state is written behind.
    fn released_by(self: &Arc<Self>, changed: Vec<(String, TopicIdPartition)>) {
        if changed.is_empty() {
            return;
        }
        self.released.notify_waiters();
        for (group, tp) in changed {
            self.persist_later(group, tp);
        }
    }

    fn persist_later(self: &Arc<Self>, group: String, tp: TopicIdPartition) {
        if self.persister.get().is_none() {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = me.persist(&group, tp).await {
                tracing::warn!(group, topic_id = %tp.0, partition = tp.1, error = ?e, "share partition state not written");
            }
        });
    }

    /// Writes the state of `group` on `tp` if it changed since last written; on a failed
    /// write the share partition is dropped from memory (the next fetch reads it back).
    pub async fn persist(&self, group: &str, tp: TopicIdPartition) -> Result<(), ResponseError> {
        let Some(persister) = self.persister.get().cloned() else {
            return Ok(());
        };
        let key = (group.to_string(), tp.0, tp.1);
        let writer = self.lock().partitions.get(&key).map(|e| e.writer.clone());
        // Gone (dropped after a failed write, or the group was deleted): nothing is ours to write.
        let writer = writer.ok_or(ResponseError::CoordinatorNotAvailable)?;
        let _turn = writer.lock().await;
        let same = |e: &&mut Entry| Arc::ptr_eq(&e.writer, &writer);
        let (state, epoch) = {
            let mut inner = self.lock();
            let e = inner
                .partitions
                .get_mut(&key)
                .filter(same)
                .ok_or(ResponseError::CoordinatorNotAvailable)?;
            let state = e.sp.snapshot();
            if state == e.persisted {
                return Ok(());
            }
            (state, (e.leader_epoch, e.state_epoch))
        };
        let (leader_epoch, state_epoch) = epoch;
        let written = persister
            .write(group, tp, leader_epoch, state_epoch, state.clone())
            .await;
        let mut inner = self.lock();
        match written {
            Ok(()) => {
                if let Some(e) = inner.partitions.get_mut(&key).filter(same) {
                    e.persisted = state;
                }
                Ok(())
            }
            Err(err) => {
                if inner.partitions.get_mut(&key).filter(same).is_some() {
                    inner.partitions.remove(&key);
                }
                drop(inner);
                self.released.notify_waiters();
                Err(err)
            }
        }
    }

    /// Makes the share partition of `group` on `tp` ready for this broker, the partition's
    /// leader in `leader_epoch`, running under `limits` (the group's settings, which may
    /// have changed since): kept when already read in that epoch, else read back from
    /// where it is persisted, else started at `start` (the offset
    /// `share.auto.offset.reset` picks) and written. Kafka initializes a share partition
    /// when the group is first assigned it and reads it on a leader's first fetch.
    pub async fn load(
        &self,
        group: &str,
        tp: TopicIdPartition,
        leader_epoch: i32,
        limits: Limits,
        start: impl std::future::Future<Output = i64>,
    ) -> Result<(), ResponseError> {
        let key = (group.to_string(), tp.0, tp.1);
        let held = |inner: &mut Inner| match inner.partitions.get_mut(&key) {
            Some(e) if e.leader_epoch == leader_epoch => {
                e.sp.limits = limits;
                true
            }
            _ => false,
        };
        if held(&mut self.lock()) {
            return Ok(());
        }
        let (stored, state_epoch) = match self.persister.get() {
            Some(p) => p.read(group, tp, leader_epoch).await?,
            None => (None, 0),
        };
        let (sp, persisted) = match stored.filter(|s| s.start >= 0) {
            Some(s) => (SharePartition::restore(&s, limits), s),
            // Nothing persisted yet: an empty start differs from any state, so it is written.
            None => (
                SharePartition::new(start.await, limits),
                Snapshot {
                    start: -1,
                    runs: Vec::new(),
                },
            ),
        };
        {
            let mut inner = self.lock();
            if held(&mut inner) {
                return Ok(());
            }
            tracing::debug!(group, topic_id = %tp.0, partition = tp.1, leader_epoch, start = sp.start(), "share partition loaded");
            inner.partitions.insert(
                key,
                Entry {
                    sp,
                    leader_epoch,
                    state_epoch,
                    persisted,
                    writer: Arc::new(tokio::sync::Mutex::new(())),
                },
            );
        }
        self.persist(group, tp).await
    }

    /// Where a read for `group` on `tp` should begin, and whether there is anything to
    /// acquire in a log from `log_start` to `log_end`; locks that expired by `now_ms` are
    /// released first. None too when the share partition is not loaded.
    pub fn next_read(
        self: &Arc<Self>,
        group: &str,
        tp: TopicIdPartition,
        log_start: i64,
        log_end: i64,
        now_ms: i64,
    ) -> Option<i64> {
        let mut inner = self.lock();
        let p = &mut inner
            .partitions
            .get_mut(&(group.to_string(), tp.0, tp.1))?
            .sp;
        let start = p.start();
        p.log_start_moved(log_start);
        let expired = p.expire(now_ms);
        let moved = p.start() != start;
        let next = p.can_acquire(log_end).then(|| p.next_read());
        if expired > 0 {
            let stats = inner.stats.entry((group.to_string(), tp.0)).or_default();
            stats.lock_timeouts += expired as u64;
        }
        drop(inner);
        let expired = expired > 0;
        if expired {
            self.released.notify_waiters();
        }
        if expired || moved {
            self.persist_later(group.to_string(), tp);
        }
        next
    }

    /// Acquires for `member` what it may have of the batches read (see
    /// [`SharePartition::acquire_records`]).
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &self,
        group: &str,
        member: &str,
        tp: TopicIdPartition,
        batches: &[(i64, i64)],
        passed_over: &[i64],
        max_records: usize,
        split: bool,
        now_ms: i64,
    ) -> Vec<Acquired> {
        let mut inner = self.lock();
        let got = match inner.partitions.get_mut(&(group.to_string(), tp.0, tp.1)) {
            Some(e) => {
                let sp = &mut e.sp;
                sp.acquire_records(member, batches, passed_over, max_records, split, now_ms)
            }
            None => Vec::new(),
        };
        let again: i64 = got
            .iter()
            .filter(|a| a.deliveries > 1)
            .map(|a| a.last - a.first + 1)
            .sum();
        if again > 0 {
            let stats = inner.stats.entry((group.to_string(), tp.0)).or_default();
            stats.redelivered += again as u64;
        }
        tracing::debug!(group, member, ?got, "share records acquired");
        got
    }

    /// Applies a member's acknowledgement batches on one partition: all of them, or none
    /// when one is refused. They count once [`Self::persist`] has written them.
    /// RENEW acknowledgements are allowed only when `renew` (a renew request, KIP-1222).
    pub fn acknowledge(
        &self,
        group: &str,
        member: &str,
        tp: TopicIdPartition,
        batches: &[(i64, i64, Vec<i8>)],
        renew: bool,
        now_ms: i64,
    ) -> Result<(), AckError> {
        let mut inner = self.lock();
        let Some(p) = inner
            .partitions
            .get_mut(&(group.to_string(), tp.0, tp.1))
            .map(|e| &mut e.sp)
        else {
            return Err(AckError::NotAcquired(batches.first().map_or(0, |b| b.0)));
        };
        // Check every batch on a copy first: a refused batch leaves all of them unapplied.
        let mut trial = p.clone();
        tracing::debug!(group, member, ?batches, "share acknowledgements");
        for (first, last, types) in batches {
            trial.acknowledge(member, *first, *last, types, renew, now_ms)?;
        }
        *p = trial;
        let stats = inner.stats.entry((group.to_string(), tp.0)).or_default();
        for (first, last, types) in batches {
            let each = if types.len() == 1 {
                last - first + 1
            } else {
                1
            };
            for t in types {
                let n = each as u64;
                match t {
                    1 => stats.accepted += n,
                    2 => stats.released += n,
                    3 => stats.rejected += n,
                    4 => stats.renewed += n,
                    _ => {}
                }
            }
        }
        drop(inner);
        // Released records can be fetched again at once.
        self.released.notify_waiters();
        Ok(())
    }

    /// `group`'s share partition `tp` in brief (DescribeShareGroupOffsets), as persisted
    /// wherever the partition is led; None when the group never started reading it.
    /// Without a persister, this broker's.
    pub async fn summary(
        &self,
        group: &str,
        tp: TopicIdPartition,
    ) -> Result<Option<Summary>, ResponseError> {
        match self.persister.get() {
            Some(p) => p.summary(group, tp).await,
            None => Ok(self
                .lock()
                .partitions
                .get(&(group.to_string(), tp.0, tp.1))
                .map(|e| {
                    let s = e.sp.snapshot();
                    Summary {
                        start: s.start,
                        leader_epoch: e.leader_epoch,
                        delivery_complete: partition::delivery_complete(s.start, &s.runs),
                    }
                })),
        }
    }

    /// Forgets every share partition and session of `group`, and removes its persisted
    /// state of `tps` (DeleteGroups: every partition the group may have read).
    pub async fn forget_group(
        &self,
        group: &str,
        tps: Vec<TopicIdPartition>,
    ) -> Result<(), ResponseError> {
        {
            let mut inner = self.lock();
            inner.partitions.retain(|(g, _, _), _| g != group);
            inner.sessions.retain(|(g, _), _| g != group);
            inner.stats.retain(|(g, _), _| g != group);
        }
        match self.persister.get() {
            Some(p) => p.delete(group, tps).await,
            None => Ok(()),
        }
    }

    /// Every share partition this broker holds, with its records in flight and acquired.
    pub fn gauges(&self) -> Vec<ShareGauges> {
        let inner = self.lock();
        inner
            .partitions
            .iter()
            .map(|((group, t, p), e)| ShareGauges {
                group: group.clone(),
                tp: (*t, *p),
                in_flight: e.sp.in_flight(),
                acquired: e.sp.acquired(),
            })
            .collect()
    }

    /// The counters of every (group, topic id) this broker served.
    pub fn stats(&self) -> Vec<(String, Uuid, ShareStats)> {
        let inner = self.lock();
        inner
            .stats
            .iter()
            .map(|((g, t), s)| (g.clone(), *t, s.clone()))
            .collect()
    }
}

fn not_found(member: &str) -> (ResponseError, String) {
    (
        ResponseError::ShareSessionNotFound,
        format!("The share session for member {member} was not found."),
    )
}

/// Gives back the records `member` of `group` holds: the share partitions that changed.
fn release_member(inner: &mut Inner, group: &str, member: &str) -> Vec<(String, TopicIdPartition)> {
    let mut changed = Vec::new();
    for ((g, t, p), e) in inner.partitions.iter_mut() {
        if g == group && e.sp.release_member(member) {
            changed.push((g.clone(), (*t, *p)));
        }
    }
    changed
}
