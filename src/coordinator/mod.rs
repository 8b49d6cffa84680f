//! The group coordinator: the async shell around the per-group state machines of
//! [`group`] (classic groups), [`consumer`] (KIP-848 groups) and [`offsets`] (the committed
//! offsets of any group, kept apart from its membership). It routes requests to groups,
//! parks JoinGroup/SyncGroup callers until their group answers, runs the timers (sessions,
//! rebalance deadlines, offset retention) and writes what the groups say to persist
//! through a [`GroupStore`].
//!
//! A broker holds only the groups whose `__consumer_offsets` partition it leads
//! ([`Coordinator::load`] / [`Coordinator::unload`]; on a single node, every partition),
//! and its changes go through a [`GroupLog`] that replicates them before they count as
//! written. Without one (unit tests of the logic above storage) changes go straight to the
//! store. The same
//! [`GroupLog`] says which groups this broker coordinates: every entry point that serves
//! one group answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS itself, through its
//! own result type, so handlers only turn results into responses.
//! All groups sit behind one mutex: every operation on a group is a few map updates; the
//! write under it is one unsynced RocksDB WriteBatch, or a queued append.

pub mod consumer;
pub mod group;
pub mod offsets;
pub mod share;
pub mod share_state;
pub mod transactions;
pub mod txn_coordinator;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::storage::{GroupCf, GroupChange, GroupStore};
use consumer::{Change, ConsumerGroup, ConsumerMember, Heartbeat, HeartbeatResult, TopicView};
use group::{
    Group, GroupLimits, GroupRecord, GroupState, Join, JoinResult, Member, Outcome, Persist, Reply,
    SyncResult,
};
use offsets::{Committed, GroupOffsets, OffsetChange};
use share::{ShareGroup, ShareHeartbeat, ShareHeartbeatResult, ShareTopics};

/// Kafka's placement of a group or transactional id in its internal topic:
/// `Utils.abs(id.hashCode()) % partitions`, with Java's String.hashCode over UTF-16, so an
/// id lands on the partition Kafka would pick.
pub fn partition_for(id: &str, partitions: usize) -> i32 {
    let h = id
        .encode_utf16()
        .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(u as i32));
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1) as i32
}

/// Coordinator settings, from the broker's `group.*` / `offsets.*` keys.
#[derive(Debug, Clone, Copy)]
pub struct CoordinatorConfig {
    pub limits: GroupLimits,
    pub offsets_retention: Duration,
    pub retention_check_interval: Duration,
    /// KIP-848 groups: `group.consumer.session.timeout.ms`, unless a group sets its own.
    pub consumer_session_timeout: Duration,
    /// Share groups: `group.share.session.timeout.ms`, unless a group sets its own.
    pub share_session_timeout: Duration,
}

/// Where a replicated coordinator sends its changes: they count as written once the
/// id's partition of the coordinator's internal topic (`__consumer_offsets` for groups,
/// `__transaction_state` for transactional ids) has committed them.
pub trait GroupLog: Send + Sync + 'static {
    /// Whether this broker coordinates `id` now: Ok, or the error to answer
    /// (COORDINATOR_LOAD_IN_PROGRESS while its partition loads, NOT_COORDINATOR elsewhere).
    fn check(&self, id: &str) -> std::result::Result<(), ResponseError>;

    /// Whether any partition this broker coordinates is still loading.
    fn loading(&self) -> bool;

    /// Queues `changes` of `id` behind the ones before; the receiver answers whether they
    /// were committed (false: they were not, and the partition's state is reloaded).
    fn submit(&self, id: &str, changes: Vec<GroupChange>) -> oneshot::Receiver<bool>;

    /// The leader epoch of `id`'s partition while this broker coordinates it: the
    /// coordinator epoch transaction markers carry.
    fn epoch(&self, id: &str) -> Option<i32>;

    /// The partition of the internal topic `id` lives in, once the topic is known.
    fn partition_of(&self, id: &str) -> Option<i32>;

    /// As [`Self::check`], for a whole partition of the internal topic.
    fn check_partition(&self, partition: i32) -> std::result::Result<(), ResponseError>;
}

/// A coordinator whose state lives in an internal topic, as the replication layer drives
/// it: it applies committed changes to its store, loads the ids of a partition it comes to
/// lead and forgets those of one it no longer leads.
pub trait Coordinated: Send + Sync + 'static {
    /// The local store committed changes are applied to.
    fn store(&self) -> &Arc<dyn GroupStore>;
    /// Loads the stored ids `mine` selects; returns how many there are.
    fn load(&self, mine: &dyn Fn(&str) -> bool) -> Result<usize>;
    /// Forgets the ids `gone` selects.
    fn unload(&self, gone: &dyn Fn(&str) -> bool);
    /// The column families of [`Self::store`] this coordinator keeps its ids in.
    fn column_families(&self) -> &'static [GroupCf];
    /// The id a stored key of `cf` belongs to (`None` for a key it cannot read).
    fn id_of(&self, cf: GroupCf, key: &[u8]) -> Option<String>;
}

impl Coordinated for Coordinator {
    fn store(&self) -> &Arc<dyn GroupStore> {
        Coordinator::store(self)
    }
    fn load(&self, mine: &dyn Fn(&str) -> bool) -> Result<usize> {
        Coordinator::load(self, mine)
    }
    fn unload(&self, gone: &dyn Fn(&str) -> bool) {
        Coordinator::unload(self, gone)
    }
    fn column_families(&self) -> &'static [GroupCf] {
        &[
            GroupCf::Groups,
            GroupCf::Offsets,
            GroupCf::TxnOffsets,
            GroupCf::Consumers,
            GroupCf::ShareGroups,
        ]
    }
    fn id_of(&self, cf: GroupCf, key: &[u8]) -> Option<String> {
        match cf {
            GroupCf::Groups | GroupCf::ShareGroups => String::from_utf8(key.to_vec()).ok(),
            GroupCf::Offsets => decode_offset_key(key).map(|(group, ..)| group),
            GroupCf::TxnOffsets => decode_txn_offset_key(key).map(|(group, ..)| group),
            GroupCf::Consumers => decode_consumer_key(key).map(|(group, _)| group),
            GroupCf::Transactions | GroupCf::ShareState => None,
        }
    }
}

/// Whether a change was written: at once (straight to the store) or once replicated.
enum Written {
    Now(bool),
    Later(oneshot::Receiver<bool>),
}

impl Written {
    async fn wait(self) -> bool {
        match self {
            Written::Now(ok) => ok,
            Written::Later(rx) => rx.await.unwrap_or(false),
        }
    }
}

pub struct Coordinator {
    inner: Mutex<Inner>,
    store: Arc<dyn GroupStore>,
    /// Set in a cluster: changes are replicated through it rather than written to `store`.
    log: OnceLock<Arc<dyn GroupLog>>,
    config: CoordinatorConfig,
    /// Wakes the timer task when a deadline may have moved earlier.
    wake: Notify,
}

/// A group id may have a classic group, a KIP-848 group and committed offsets, each under
/// its own map. A group with offsets but neither state machine (its committers use no
/// group protocol, or its KIP-848 group is gone) shows as an empty classic group, as Kafka
/// shows simple consumer groups.
#[derive(Default)]
struct Inner {
    /// Classic groups.
    groups: HashMap<String, Group>,
    /// KIP-848 consumer groups.
    consumers: HashMap<String, ConsumerGroup>,
    /// Share groups (KIP-932), persisted with their members.
    shares: HashMap<String, ShareGroup>,
    /// Committed offsets, of classic and KIP-848 groups alike. An entry lives from the
    /// group's first commit until the group is deleted or the retention sweep finds
    /// nothing left in it; a refused first commit makes one too, so the group is known
    /// (empty) until that sweep, as it was when a classic group held the offsets.
    offsets: HashMap<String, GroupOffsets>,
    /// Offsets transactions committed (TxnOffsetCommit), per group and producer id, pending
    /// until the transaction's marker commits or drops them (KIP-98/447).
    pending: HashMap<(String, i64), Pending>,
    joins: HashMap<(String, String), oneshot::Sender<JoinResult>>,
    syncs: HashMap<(String, String), oneshot::Sender<SyncResult>>,
}

impl Inner {
    /// Whether `group_id` is a classic or KIP-848 group, or has offsets, rather than a
    /// share group: the share APIs then answer GROUP_ID_NOT_FOUND.
    fn held_by_other_type(&self, group_id: &str) -> bool {
        let other = self.consumers.contains_key(group_id)
            || self
                .groups
                .get(group_id)
                .is_some_and(|g| g.state != GroupState::Dead)
            || self.offsets.contains_key(group_id);
        other && !self.shares.contains_key(group_id)
    }

    /// Every group id with a live classic group, a KIP-848 group or offsets, in order.
    fn ids(&self) -> BTreeSet<&str> {
        let dead = |id: &str| {
            self.groups
                .get(id)
                .is_some_and(|g| g.state == GroupState::Dead)
        };
        self.groups
            .keys()
            .chain(self.consumers.keys())
            .chain(self.shares.keys())
            .chain(self.offsets.keys())
            .map(String::as_str)
            .filter(|id| !dead(id))
            .collect()
    }
}

/// Why an OffsetCommit stored nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitError {
    /// This broker does not coordinate the group now: the answer for every partition of
    /// the request, even those refused before they reached the coordinator.
    Routing(ResponseError),
    /// The member, its generation or the write was refused: the answer for the partitions
    /// that were to be committed.
    Refused(ResponseError),
}

/// A group as DescribeGroups shows it.
pub struct Described {
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<Member>,
}

/// A group as ListGroups shows it.
pub struct Listed {
    pub id: String,
    pub protocol_type: String,
    pub state: &'static str,
    /// "classic", "consumer" or "share"
    pub group_type: &'static str,
}

/// A group as metrics show it: its member count and committed offsets.
pub struct GroupSnapshot {
    pub id: String,
    pub members: usize,
    /// (topic, partition, committed offset)
    pub offsets: Vec<(String, i32, i64)>,
}

/// A KIP-848 group as ConsumerGroupDescribe shows it.
pub struct ConsumerDescribed {
    pub state: &'static str,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: &'static str,
    /// (member, its target assignment)
    pub members: Vec<(ConsumerMember, Vec<(String, i32)>)>,
}

/// A share group as ShareGroupDescribe shows it.
pub struct ShareDescribed {
    pub state: &'static str,
    pub epoch: i32,
    pub members: Vec<share::ShareMember>,
    /// Every topic its members subscribed to (see [`ShareGroup::topics_ever`]).
    pub topics: Vec<String>,
}

impl Coordinator {
    /// Loads every stored group and committed offset.
    pub fn open(store: Arc<dyn GroupStore>, config: CoordinatorConfig) -> Result<Coordinator> {
        let inner = read_groups(store.as_ref(), &config, &|_| true)?;
        tracing::info!(
            groups = inner.groups.len(),
            consumer_groups = inner.consumers.len(),
            groups_with_offsets = inner.offsets.len(),
            "group coordinator loaded"
        );
        Ok(Coordinator {
            inner: Mutex::new(inner),
            store,
            log: OnceLock::new(),
            config,
            wake: Notify::new(),
        })
    }

    /// The local store: the state of the `__consumer_offsets` records this broker has
    /// applied.
    pub fn store(&self) -> &Arc<dyn GroupStore> {
        &self.store
    }

    /// Switches to replicated writes (once, on joining a cluster) and forgets every group:
    /// from now on groups are loaded per partition this broker leads.
    pub fn replicate_through(&self, log: Arc<dyn GroupLog>) {
        let _ = self.log.set(log);
        self.unload(&|_| true);
    }

    /// Loads the stored groups `mine` selects, replacing what memory held of them.
    pub fn load(&self, mine: &dyn Fn(&str) -> bool) -> Result<usize> {
        let loaded = read_groups(self.store.as_ref(), &self.config, mine)?;
        let n = loaded.ids().len();
        self.unload(mine);
        let mut inner = self.lock();
        inner.groups.extend(loaded.groups);
        inner.consumers.extend(loaded.consumers);
        inner.offsets.extend(loaded.offsets);
        inner.pending.extend(loaded.pending);
        inner.shares.extend(loaded.shares);
        drop(inner);
        self.wake.notify_one();
        Ok(n)
    }

    /// Forgets the groups `gone` selects; their parked JoinGroup/SyncGroup callers get
    /// COORDINATOR_NOT_AVAILABLE and look for the coordinator again.
    pub fn unload(&self, gone: &dyn Fn(&str) -> bool) {
        let mut inner = self.lock();
        inner.groups.retain(|id, _| !gone(id));
        inner.consumers.retain(|id, _| !gone(id));
        inner.shares.retain(|id, _| !gone(id));
        inner.offsets.retain(|id, _| !gone(id));
        inner.pending.retain(|(id, _), _| !gone(id));
        inner.joins.retain(|(id, _), _| !gone(id));
        inner.syncs.retain(|(id, _), _| !gone(id));
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this broker coordinates `group_id` now (always, without a [`GroupLog`]). Asked
    /// before taking our lock: the [`GroupLog`] takes its own lock before ours.
    /// Whether this broker coordinates `group_id` now: NOT_COORDINATOR or
    /// COORDINATOR_LOAD_IN_PROGRESS otherwise.
    pub fn route(&self, group_id: &str) -> std::result::Result<(), ResponseError> {
        match self.log.get() {
            Some(log) => log.check(group_id),
            None => Ok(()),
        }
    }

    pub async fn join(&self, group_id: &str, j: Join) -> JoinResult {
        if let Err(e) = self.route(group_id) {
            return JoinResult::error(e, &j.member_id);
        }
        let rx = {
            let mut inner = self.lock();
            if inner.consumers.get(group_id).is_some_and(|c| !c.is_empty()) {
                return JoinResult::error(ResponseError::InconsistentGroupProtocol, &j.member_id);
            }
            let now = Instant::now();
            let limits = self.config.limits;
            // A group that had only offsets has been empty since they came: its offsets
            // keep expiring from then if this join leaves it empty.
            let empty_since = inner.offsets.get(group_id).map_or(now, |o| o.since);
            let g = inner
                .groups
                .entry(group_id.to_string())
                .or_insert_with(|| Group::new(group_id, limits, empty_since));
            let outcome = g.join(now, j);
            let parked = park(&mut inner.joins, group_id, outcome);
            self.settle(&mut inner, group_id);
            match parked {
                Ok(r) => return r,
                Err(rx) => rx,
            }
        };
        self.wake.notify_one();
        rx.await
            .unwrap_or_else(|_| JoinResult::error(ResponseError::CoordinatorNotAvailable, ""))
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        &self,
        group_id: &str,
        member: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResult {
        if let Err(e) = self.route(group_id) {
            return SyncResult::error(e);
        }
        let rx = {
            let mut inner = self.lock();
            let Some(g) = inner.groups.get_mut(group_id) else {
                return SyncResult::error(ResponseError::UnknownMemberId);
            };
            let outcome = g.sync(
                Instant::now(),
                member,
                instance_id,
                generation,
                protocol_type,
                protocol_name,
                assignments,
            );
            let parked = park(&mut inner.syncs, group_id, outcome);
            self.settle(&mut inner, group_id);
            match parked {
                Ok(r) => return r,
                Err(rx) => rx,
            }
        };
        rx.await
            .unwrap_or_else(|_| SyncResult::error(ResponseError::CoordinatorNotAvailable))
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> std::result::Result<(), ResponseError> {
        self.route(group_id)?;
        let mut inner = self.lock();
        let g = inner
            .groups
            .get_mut(group_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        g.heartbeat(Instant::now(), member, instance_id, generation)
    }

    /// LeaveGroup: one result per (member id, instance id), or the group's error.
    pub fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> std::result::Result<Vec<std::result::Result<(), ResponseError>>, ResponseError> {
        self.route(group_id)?;
        let mut inner = self.lock();
        let now = Instant::now();
        let results = match inner.groups.get_mut(group_id) {
            None => vec![Err(ResponseError::UnknownMemberId); members.len()],
            Some(g) => members
                .iter()
                .map(|(id, instance)| g.leave(now, id, instance.as_deref()))
                .collect(),
        };
        self.settle(&mut inner, group_id);
        drop(inner);
        self.wake.notify_one();
        Ok(results)
    }

    /// OffsetCommit: checks the member and generation, then stores every offset (in a
    /// cluster: answers once they are replicated). With no offsets it checks only that
    /// this broker coordinates the group, and changes nothing.
    pub async fn commit(
        &self,
        group_id: &str,
        member: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<(String, i32, Committed)>,
    ) -> std::result::Result<(), CommitError> {
        self.route(group_id).map_err(CommitError::Routing)?;
        if offsets.is_empty() {
            return Ok(());
        }
        self.commit_now(group_id, member, instance_id, generation, offsets)
            .map_err(CommitError::Refused)?
            .wait()
            .await
            .then_some(())
            .ok_or(CommitError::Refused(ResponseError::CoordinatorNotAvailable))
    }

    fn commit_now(
        &self,
        group_id: &str,
        member: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<(String, i32, Committed)>,
    ) -> std::result::Result<Written, ResponseError> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let consumer_check = inner
            .consumers
            .get(group_id)
            .filter(|c| !c.is_empty() || !member.is_empty())
            .map(|c| c.check_commit(member, generation));
        let o = inner
            .offsets
            .entry(group_id.to_string())
            .or_insert_with(|| GroupOffsets::new(Instant::now()));
        match (consumer_check, inner.groups.get(group_id)) {
            (Some(check), _) => check?,
            (None, Some(g)) => g.check_commit(member, instance_id, generation)?,
            // No group protocol in use: only committers outside any group (generation -1)
            // may commit, as to an empty classic group.
            (None, None) if generation < 0 => {}
            (None, None) => return Err(ResponseError::UnknownMemberId),
        }
        for (topic, partition, c) in offsets {
            o.commit(&topic, partition, c);
        }
        Ok(self.settle(inner, group_id))
    }

    /// TxnOffsetCommit: offsets of `producer_id`'s ongoing transaction, pending until its
    /// marker. A named member (v3+) is checked as for OffsetCommit; a transactional
    /// producer outside any group commits with generation -1 and no member. `producer` is
    /// the producer's id and epoch.
    pub async fn txn_commit(
        &self,
        group_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        member: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<(String, i32, Committed)>,
    ) -> std::result::Result<(), ResponseError> {
        self.route(group_id)?;
        let written = {
            let mut inner = self.lock();
            if !member.is_empty() || generation >= 0 {
                let inner = &*inner;
                match (inner.consumers.get(group_id), inner.groups.get(group_id)) {
                    (Some(c), _) if !c.is_empty() => c.check_commit(member, generation)?,
                    (_, Some(g)) => g.check_commit(member, instance_id, generation)?,
                    _ => return Err(ResponseError::IllegalGeneration),
                }
            }
            let pending = inner
                .pending
                .entry((group_id.to_string(), producer_id))
                .or_default();
            pending.epoch = pending.epoch.max(producer_epoch);
            let mut changes = Vec::with_capacity(offsets.len());
            for (topic, partition, c) in offsets {
                changes.push(GroupChange {
                    cf: GroupCf::TxnOffsets,
                    key: txn_offset_key(group_id, &topic, partition, producer_id),
                    value: Some(encode_pending(&c, pending.epoch)),
                });
                pending.offsets.insert((topic, partition), c);
            }
            self.write(group_id, changes)
        };
        match written.wait().await {
            true => Ok(()),
            false => Err(ResponseError::CoordinatorNotAvailable),
        }
    }

    /// A transaction marker for `producer_id` reached `__consumer_offsets` partition
    /// `partition`: its pending offsets in the groups of that partition become committed
    /// (`commit`) or are dropped. A marker older than the offsets (its producer epoch below
    /// theirs: one from a coordinator that has since lost the transactional id, for an
    /// earlier transaction) is refused with INVALID_PRODUCER_EPOCH and changes nothing, as
    /// a partition's log refuses it.
    pub async fn complete_txn_offsets(
        &self,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<()> {
        let log = self.log.get().cloned();
        // Until the partition's groups are loaded their pending offsets are not in memory:
        // a marker applied now would find nothing and be lost. The transaction
        // coordinator retries it.
        if let Some(log) = &log {
            log.check_partition(partition).map_err(Error::Transaction)?;
        }
        let in_partition = |group: &str| {
            log.as_ref()
                .is_none_or(|l| l.partition_of(group) == Some(partition))
        };
        let writes: Vec<Written> = {
            let mut inner = self.lock();
            let inner = &mut *inner;
            let groups: Vec<String> = inner
                .pending
                .keys()
                .filter(|(g, pid)| *pid == producer_id && in_partition(g))
                .map(|(g, _)| g.clone())
                .collect();
            let stale = groups
                .iter()
                .filter_map(|g| inner.pending.get(&(g.clone(), producer_id)))
                .any(|p| producer_epoch < p.epoch);
            if stale {
                return Err(Error::Transaction(ResponseError::InvalidProducerEpoch));
            }
            let mut writes = Vec::with_capacity(groups.len());
            for group in groups {
                let Some(Pending { offsets, .. }) =
                    inner.pending.remove(&(group.clone(), producer_id))
                else {
                    continue;
                };
                let mut changes: Vec<GroupChange> = offsets
                    .keys()
                    .map(|(t, p)| GroupChange {
                        cf: GroupCf::TxnOffsets,
                        key: txn_offset_key(&group, t, *p, producer_id),
                        value: None,
                    })
                    .collect();
                if commit {
                    let o = inner
                        .offsets
                        .entry(group.clone())
                        .or_insert_with(|| GroupOffsets::new(Instant::now()));
                    for ((t, p), c) in offsets {
                        o.commit(&t, p, c);
                    }
                    changes.extend(self.settle_changes(inner, &group));
                }
                writes.push(self.write(&group, changes));
            }
            writes
        };
        for w in writes {
            if !w.wait().await {
                return Err(Error::NotEnoughReplicas { isr: 0, min: 1 });
            }
        }
        Ok(())
    }

    /// Whether a transaction holds an offset of `group_id` for the partition pending
    /// (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT then).
    pub fn has_pending(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        let key = (topic.to_string(), partition);
        self.lock()
            .pending
            .iter()
            .any(|((g, _), p)| g == group_id && p.offsets.contains_key(&key))
    }

    /// The committed offsets of a group: all of them, or those of `wanted` topics and
    /// partitions (absent ones as `None`).
    #[allow(clippy::type_complexity)]
    pub fn committed(
        &self,
        group_id: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
    ) -> std::result::Result<Vec<(String, i32, Option<Committed>)>, ResponseError> {
        self.route(group_id)?;
        let inner = self.lock();
        let o = inner.offsets.get(group_id);
        Ok(match wanted {
            Some(topics) => topics
                .into_iter()
                .flat_map(|(t, ps)| {
                    ps.into_iter()
                        .map(move |p| (t.clone(), p))
                        .collect::<Vec<_>>()
                })
                .map(|(t, p)| {
                    let c = o.and_then(|o| o.get(&t, p).cloned());
                    (t, p, c)
                })
                .collect(),
            None => o
                .map(|o| {
                    o.iter()
                        .map(|(t, p, c)| (t.to_string(), p, Some(c.clone())))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// OffsetDelete: refused for topics the group's members still subscribe to.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        topics: &[(String, Vec<i32>)],
    ) -> std::result::Result<Vec<(String, i32, Option<ResponseError>)>, ResponseError> {
        self.route(group_id)?;
        let (out, written) = self.delete_offsets_now(group_id, topics)?;
        match written.wait().await {
            true => Ok(out),
            false => Err(ResponseError::CoordinatorNotAvailable),
        }
    }

    #[allow(clippy::type_complexity)]
    fn delete_offsets_now(
        &self,
        group_id: &str,
        topics: &[(String, Vec<i32>)],
    ) -> std::result::Result<(Vec<(String, i32, Option<ResponseError>)>, Written), ResponseError>
    {
        let mut inner = self.lock();
        let mut subscribed = match inner.groups.get(group_id) {
            Some(g) if g.state == GroupState::Dead => return Err(ResponseError::GroupIdNotFound),
            Some(g) if !g.is_empty() && g.protocol_type.as_deref() != Some("consumer") => {
                return Err(ResponseError::NonEmptyGroup)
            }
            Some(g) => g.subscribed_topics(),
            None if inner.offsets.contains_key(group_id) => Vec::new(),
            None => return Err(ResponseError::GroupIdNotFound),
        };
        if let Some(c) = inner.consumers.get(group_id) {
            subscribed.extend(c.members.values().flat_map(|m| m.topics.iter().cloned()));
        }
        let mut offsets = inner.offsets.get_mut(group_id);
        let mut out = Vec::new();
        for (topic, partitions) in topics {
            for p in partitions {
                if subscribed.contains(topic) {
                    out.push((
                        topic.clone(),
                        *p,
                        Some(ResponseError::GroupSubscribedToTopic),
                    ));
                } else {
                    if let Some(o) = offsets.as_mut() {
                        o.delete(topic, *p);
                    }
                    out.push((topic.clone(), *p, None));
                }
            }
        }
        Ok((out, self.settle(&mut inner, group_id)))
    }

    /// Every live group (classic or KIP-848) with its members and committed offsets.
    pub fn snapshot(&self) -> Vec<GroupSnapshot> {
        let inner = self.lock();
        inner
            .ids()
            .into_iter()
            .map(|id| GroupSnapshot {
                members: match (inner.consumers.get(id), inner.groups.get(id)) {
                    (Some(c), _) => c.members.len(),
                    (None, Some(g)) => g.members.len(),
                    (None, None) => 0,
                },
                offsets: inner.offsets.get(id).map_or_else(Vec::new, |o| {
                    o.iter()
                        .map(|(t, p, c)| (t.to_string(), p, c.offset))
                        .collect()
                }),
                id: id.to_string(),
            })
            .collect()
    }

    /// Whether groups are still being loaded (ListGroups then answers
    /// COORDINATOR_LOAD_IN_PROGRESS, as Kafka's coordinator does).
    pub fn loading(&self) -> bool {
        self.log.get().is_some_and(|l| l.loading())
    }

    pub fn list(&self) -> Vec<Listed> {
        let inner = self.lock();
        inner
            .ids()
            .into_iter()
            .map(|id| match (inner.consumers.get(id), inner.groups.get(id)) {
                _ if inner.shares.contains_key(id) => Listed {
                    id: id.to_string(),
                    protocol_type: "share".to_string(),
                    state: inner.shares[id].state_name(),
                    group_type: "share",
                },
                (Some(c), _) => Listed {
                    id: id.to_string(),
                    protocol_type: "consumer".to_string(),
                    state: c.state_name(),
                    group_type: "consumer",
                },
                (None, g) => Listed {
                    id: id.to_string(),
                    protocol_type: g.and_then(|g| g.protocol_type.clone()).unwrap_or_default(),
                    state: g.map_or(GroupState::Empty, |g| g.state).name(),
                    group_type: "classic",
                },
            })
            .collect()
    }

    /// DescribeGroups for one group: `None` when there is no such group.
    pub fn describe(
        &self,
        group_id: &str,
    ) -> std::result::Result<Option<Described>, ResponseError> {
        self.route(group_id)?;
        let inner = self.lock();
        let Some(g) = inner.groups.get(group_id) else {
            let offsets_only = inner.offsets.contains_key(group_id).then(|| Described {
                state: GroupState::Empty,
                protocol_type: String::new(),
                protocol_name: String::new(),
                members: Vec::new(),
            });
            return Ok(offsets_only);
        };
        Ok(Some(Described {
            state: g.state,
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol_name: match g.state {
                GroupState::Stable => g.protocol_name.clone().unwrap_or_default(),
                _ => String::new(),
            },
            members: g.members.values().cloned().collect(),
        }))
    }

    /// DeleteGroups for one group.
    pub async fn delete_group(&self, group_id: &str) -> std::result::Result<(), ResponseError> {
        self.route(group_id)?;
        self.delete_group_now(group_id)?
            .wait()
            .await
            .then_some(())
            .ok_or(ResponseError::CoordinatorNotAvailable)
    }

    fn delete_group_now(&self, group_id: &str) -> std::result::Result<Written, ResponseError> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let mut changes = Vec::new();
        if let Some(g) = inner.shares.get(group_id) {
            if !g.is_empty() {
                return Err(ResponseError::NonEmptyGroup);
            }
            inner.shares.remove(group_id);
            return Ok(self.write(group_id, vec![share_group_change(group_id, None)]));
        }
        if let Some(c) = inner.consumers.get(group_id) {
            if !c.is_empty() {
                return Err(ResponseError::NonEmptyGroup);
            }
            let mut c = inner.consumers.remove(group_id).expect("found");
            changes.extend(encode_consumer_changes(group_id, c.take_removal()));
            if !inner.groups.contains_key(group_id) && !inner.offsets.contains_key(group_id) {
                return Ok(self.write(group_id, changes));
            }
        }
        match inner.groups.get_mut(group_id) {
            Some(g) => {
                match g.state {
                    GroupState::Dead => return Err(ResponseError::GroupIdNotFound),
                    GroupState::Empty => {}
                    _ => return Err(ResponseError::NonEmptyGroup),
                }
                g.delete();
            }
            None if inner.offsets.contains_key(group_id) => {}
            None => return Err(ResponseError::GroupIdNotFound),
        }
        if let Some(o) = inner.offsets.get_mut(group_id) {
            o.delete_all();
        }
        changes.extend(self.settle_changes(inner, group_id));
        inner.offsets.remove(group_id);
        Ok(self.write(group_id, changes))
    }

    /// ConsumerGroupHeartbeat (KIP-848) against the cluster's `topics`. The
    /// answer waits until what the heartbeat changed is written (in a cluster: replicated),
    /// as Kafka's does; if it cannot be, the member is told to find its coordinator again.
    pub async fn consumer_heartbeat(
        &self,
        group_id: &str,
        h: Heartbeat,
        topics: &(dyn TopicView + Sync),
    ) -> HeartbeatResult {
        if let Err(e) = self.route(group_id) {
            return HeartbeatResult::error(e, e.to_string(), &h.member_id);
        }
        if let Some(msg) = h.invalid() {
            return HeartbeatResult::error(ResponseError::InvalidRequest, msg, &h.member_id);
        }
        let member_id = h.member_id.clone();
        let (r, written) = self.consumer_heartbeat_now(group_id, h, topics);
        if r.error.is_some() || written.wait().await {
            return r;
        }
        HeartbeatResult {
            error: Some((
                ResponseError::CoordinatorNotAvailable,
                "the group's state could not be written".to_string(),
            )),
            member_id,
            epoch: -1,
            assignment: None,
        }
    }

    fn consumer_heartbeat_now(
        &self,
        group_id: &str,
        h: Heartbeat,
        topics: &dyn TopicView,
    ) -> (HeartbeatResult, Written) {
        let mut inner = self.lock();
        if inner
            .groups
            .get(group_id)
            .is_some_and(|g| !g.is_empty() && g.state != GroupState::Dead)
        {
            let r = HeartbeatResult {
                error: Some((
                    ResponseError::GroupIdNotFound,
                    format!("group {group_id} is a classic group with members"),
                )),
                member_id: h.member_id,
                epoch: -1,
                assignment: None,
            };
            return (r, Written::Now(true));
        }
        if inner.shares.contains_key(group_id) {
            let r = HeartbeatResult::error(
                ResponseError::GroupIdNotFound,
                format!("Group {group_id} is not a consumer group."),
                &h.member_id,
            );
            return (r, Written::Now(true));
        }
        let joining = h.epoch == 0;
        let timeout = h
            .session_timeout
            .unwrap_or(self.config.consumer_session_timeout);
        let c = inner.consumers.entry(group_id.to_string()).or_default();
        let r = c.heartbeat(Instant::now(), timeout, h, topics);
        let changes = encode_consumer_changes(group_id, c.take_changes());
        let written = self.write(group_id, changes);
        drop(inner);
        if joining {
            self.wake.notify_one();
        }
        (r, written)
    }

    /// ShareGroupHeartbeat (KIP-932) against the cluster's `topics`. A change of the group's
    /// record (epoch, topics, members) is written before the answer.
    pub async fn share_heartbeat(
        &self,
        group_id: &str,
        h: ShareHeartbeat,
        topics: &(dyn ShareTopics + Sync),
    ) -> ShareHeartbeatResult {
        let member_id = h.member_id.clone();
        let (r, written) = self.share_heartbeat_now(group_id, h, topics);
        if r.error.is_some() || written.wait().await {
            return r;
        }
        ShareHeartbeatResult {
            error: Some((
                ResponseError::CoordinatorNotAvailable,
                "the group's state could not be written".to_string(),
            )),
            member_id,
            epoch: -1,
            assignment: None,
        }
    }

    fn share_heartbeat_now(
        &self,
        group_id: &str,
        h: ShareHeartbeat,
        topics: &dyn ShareTopics,
    ) -> (ShareHeartbeatResult, Written) {
        let refuse = |e: ResponseError, msg: String| ShareHeartbeatResult {
            error: Some((e, msg)),
            member_id: h.member_id.clone(),
            epoch: -1,
            assignment: None,
        };
        if let Err(e) = self.route(group_id) {
            return (refuse(e, e.to_string()), Written::Now(true));
        }
        if let Some(msg) = h.invalid() {
            return (
                refuse(ResponseError::InvalidRequest, msg.to_string()),
                Written::Now(true),
            );
        }
        let mut inner = self.lock();
        if inner.held_by_other_type(group_id) {
            let r = refuse(
                ResponseError::GroupIdNotFound,
                format!("Group {group_id} is not a share group."),
            );
            return (r, Written::Now(true));
        }
        let joining = h.epoch == 0;
        let before = inner.shares.get(group_id).map(|g| g.record());
        let g = inner.shares.entry(group_id.to_string()).or_default();
        let timeout = h
            .session_timeout
            .unwrap_or(self.config.share_session_timeout);
        let r = g.heartbeat(Instant::now(), timeout, h, topics);
        let after = g.record();
        let written = match before != Some(after.clone()) {
            true => self.write(group_id, vec![share_group_change(group_id, Some(&after))]),
            false => Written::Now(true),
        };
        drop(inner);
        if joining {
            self.wake.notify_one();
        }
        (r, written)
    }

    /// ShareGroupDescribe: `None` when `group_id` is not a share group.
    pub fn share_describe(
        &self,
        group_id: &str,
    ) -> std::result::Result<Option<ShareDescribed>, ResponseError> {
        self.route(group_id)?;
        let inner = self.lock();
        Ok(inner.shares.get(group_id).map(|g| ShareDescribed {
            state: g.state_name(),
            epoch: g.epoch,
            members: g.members.values().cloned().collect(),
            topics: g.topics_ever.iter().cloned().collect(),
        }))
    }

    /// Before AlterShareGroupOffsets or DeleteShareGroupOffsets changes `group_id`'s share
    /// partitions of `topics`: the group must be a share group without members (created
    /// empty when no group has the id, as Kafka does, so offsets can be set before its
    /// first member joins), and the topics are recorded among those it has read.
    pub async fn share_offsets_changeable(
        &self,
        group_id: &str,
        topics: &[String],
    ) -> std::result::Result<(), (ResponseError, String)> {
        self.route(group_id).map_err(|e| (e, e.to_string()))?;
        let written = {
            let mut inner = self.lock();
            if inner.held_by_other_type(group_id) {
                return Err((
                    ResponseError::GroupIdNotFound,
                    format!("Group {group_id} is not a share group."),
                ));
            }
            let before = inner.shares.get(group_id).map(|g| g.record());
            let g = inner.shares.entry(group_id.to_string()).or_default();
            if !g.members.is_empty() {
                return Err((
                    ResponseError::NonEmptyGroup,
                    format!("Share group {group_id} is not empty: its offsets cannot be changed while it has members."),
                ));
            }
            g.topics_ever.extend(topics.iter().cloned());
            let after = g.record();
            match before != Some(after.clone()) {
                true => self.write(group_id, vec![share_group_change(group_id, Some(&after))]),
                false => Written::Now(true),
            }
        };
        match written.wait().await {
            true => Ok(()),
            false => Err((
                ResponseError::CoordinatorNotAvailable,
                "the group's state could not be written".into(),
            )),
        }
    }

    /// Whether `group_id` is a share group here.
    pub fn is_share_group(&self, group_id: &str) -> bool {
        self.lock().shares.contains_key(group_id)
    }

    /// ConsumerGroupDescribe: `None` when `group_id` is not a KIP-848 group (Kafka answers
    /// GROUP_ID_NOT_FOUND, and the admin client then asks DescribeGroups).
    pub fn consumer_describe(
        &self,
        group_id: &str,
    ) -> std::result::Result<Option<ConsumerDescribed>, ResponseError> {
        self.route(group_id)?;
        let inner = self.lock();
        let Some(c) = inner.consumers.get(group_id) else {
            return Ok(None);
        };
        Ok(Some(ConsumerDescribed {
            state: c.state_name(),
            epoch: c.epoch,
            assignment_epoch: c.assignment_epoch,
            assignor: c.assignor_name(),
            members: c
                .members
                .values()
                .map(|m| {
                    let target = c
                        .target
                        .get(&m.id)
                        .map(|t| t.iter().cloned().collect())
                        .unwrap_or_default();
                    (m.clone(), target)
                })
                .collect(),
        }))
    }

    /// Delivers a group's delayed answers and writes what it wants persisted (or queues it
    /// for replication); forgets dead groups.
    fn settle(&self, inner: &mut Inner, group_id: &str) -> Written {
        let changes = self.settle_changes(inner, group_id);
        self.write(group_id, changes)
    }

    /// [`Self::settle`] without the write: the changes to make.
    fn settle_changes(&self, inner: &mut Inner, group_id: &str) -> Vec<GroupChange> {
        let mut changes: Vec<GroupChange> = match inner.offsets.get_mut(group_id) {
            Some(o) => o
                .take_changes()
                .into_iter()
                .map(|c| encode_offset_change(group_id, c))
                .collect(),
            None => Vec::new(),
        };
        let Some(g) = inner.groups.get_mut(group_id) else {
            return changes;
        };
        let replies = g.take_replies();
        let persist = g.take_persist();
        let dead = g.state == GroupState::Dead;
        for reply in replies {
            match reply {
                Reply::Join(member, r) => {
                    if let Some(tx) = inner.joins.remove(&(group_id.to_string(), member)) {
                        let _ = tx.send(r);
                    }
                }
                Reply::Sync(member, r) => {
                    if let Some(tx) = inner.syncs.remove(&(group_id.to_string(), member)) {
                        let _ = tx.send(r);
                    }
                }
            }
        }
        if dead {
            inner.groups.remove(group_id);
        }
        changes.extend(persist.into_iter().map(|p| encode_change(group_id, p)));
        changes
    }

    /// The retention sweep of one group: expires its offsets and says whether nothing is
    /// left to remember of it (then a classic group is deleted, and the caller forgets the
    /// group's offsets once their changes are settled).
    fn sweep(&self, inner: &mut Inner, group_id: &str, now: Instant) -> bool {
        // A classic group knows when it last became empty. Offsets with no classic group
        // count from when they came into memory; for a KIP-848 group too, whose members
        // do not hold its offsets back (as when a placeholder classic group held them).
        let empty_since = match (inner.groups.get(group_id), inner.offsets.get(group_id)) {
            (Some(g), _) => g.empty_since.filter(|_| g.is_empty()),
            (None, Some(o)) => Some(o.since),
            (None, None) => None,
        };
        let offsets_left = match inner.offsets.get_mut(group_id) {
            Some(o) => {
                o.expire(now, now_ms(), self.config.offsets_retention, empty_since);
                !o.is_empty()
            }
            None => false,
        };
        match inner.groups.get_mut(group_id) {
            Some(g) if g.state == GroupState::Empty && !offsets_left => {
                // Nothing left to remember: Kafka's group becomes Dead.
                g.delete();
                true
            }
            Some(_) => false,
            None => !offsets_left,
        }
    }

    /// Writes a group's changes to the store, or queues them for replication.
    fn write(&self, group_id: &str, changes: Vec<GroupChange>) -> Written {
        if changes.is_empty() {
            return Written::Now(true);
        }
        if let Some(log) = self.log.get() {
            return Written::Later(log.submit(group_id, changes));
        }
        match self.store.write_groups(&changes) {
            Ok(()) => Written::Now(true),
            Err(e) => {
                tracing::error!(group = group_id, error = %e, "cannot store group state");
                Written::Now(false)
            }
        }
    }

    /// Runs the timers until shutdown: session expiry, rebalance deadlines, offset retention.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut next_sweep = Instant::now() + self.config.retention_check_interval;
        loop {
            let next = {
                let mut inner = self.lock();
                let now = Instant::now();
                let ids: Vec<String> = inner
                    .groups
                    .keys()
                    .chain(inner.offsets.keys())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .cloned()
                    .collect();
                let sweep = now >= next_sweep;
                let consumer_ids: Vec<String> = inner.consumers.keys().cloned().collect();
                for id in consumer_ids {
                    let c = inner.consumers.get_mut(&id).expect("listed");
                    c.tick(now);
                    let mut changes = c.take_changes();
                    // empty KIP-848 groups keep only their offsets
                    if sweep && c.is_empty() {
                        changes.extend(c.take_removal());
                        inner.consumers.remove(&id);
                    }
                    // a failed write reloads the partition's groups
                    let _ = self.write(&id, encode_consumer_changes(&id, changes));
                }
                let mut expired = Vec::new();
                for (id, g) in inner.shares.iter_mut() {
                    if !g.expire(now).is_empty() {
                        expired.push((id.clone(), g.record()));
                    }
                }
                for (id, r) in expired {
                    // as above: a failed write reloads the partition's groups
                    let _ = self.write(&id, vec![share_group_change(&id, Some(&r))]);
                }
                for id in &ids {
                    if let Some(g) = inner.groups.get_mut(id) {
                        g.tick(now);
                    }
                    let forget = sweep && self.sweep(&mut inner, id, now);
                    self.settle(&mut inner, id);
                    if forget {
                        inner.offsets.remove(id);
                    }
                }
                if sweep {
                    next_sweep = now + self.config.retention_check_interval;
                }
                inner
                    .groups
                    .values()
                    .filter_map(|g| g.next_deadline())
                    .chain(inner.consumers.values().filter_map(|c| c.next_deadline()))
                    .chain(inner.shares.values().filter_map(|g| g.next_deadline()))
                    .min()
                    .unwrap_or(next_sweep)
                    .min(next_sweep)
            };
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.changed() => break,
            }
        }
        // Parked JoinGroup/SyncGroup callers get COORDINATOR_NOT_AVAILABLE and look again.
        let mut inner = self.lock();
        inner.joins.clear();
        inner.syncs.clear();
    }
}

/// The stored groups whose ids `wanted` selects: classic groups, KIP-848 groups, share
/// groups and the committed offsets of every group.
fn read_groups(
    store: &dyn GroupStore,
    config: &CoordinatorConfig,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Inner> {
    let limits = config.limits;
    let now = Instant::now();
    let mut groups: HashMap<String, Group> = HashMap::new();
    let mut offsets: HashMap<String, GroupOffsets> = HashMap::new();
    for (key, value) in store.load_groups(GroupCf::Groups)? {
        let id =
            String::from_utf8(key).map_err(|_| Error::Storage("group id is not UTF-8".into()))?;
        if !wanted(&id) {
            continue;
        }
        let record: GroupRecord = serde_json::from_slice(&value)
            .map_err(|e| Error::Storage(format!("group {id}: {e}")))?;
        groups.insert(id.clone(), Group::restore(&id, record, limits, now));
    }
    for (key, value) in store.load_groups(GroupCf::Offsets)? {
        let (group, topic, partition) =
            decode_offset_key(&key).ok_or_else(|| Error::Storage("malformed offset key".into()))?;
        if !wanted(&group) {
            continue;
        }
        let committed = decode_committed(&value)
            .ok_or_else(|| Error::Storage(format!("malformed offset of group {group}")))?;
        offsets
            .entry(group)
            .or_insert_with(|| GroupOffsets::new(now))
            .restore(topic, partition, committed);
    }
    let mut pending: HashMap<(String, i64), Pending> = HashMap::new();
    for (key, value) in store.load_groups(GroupCf::TxnOffsets)? {
        let (group, topic, partition, pid) = decode_txn_offset_key(&key)
            .ok_or_else(|| Error::Storage("malformed transactional offset key".into()))?;
        if !wanted(&group) {
            continue;
        }
        let (committed, epoch) = decode_pending(&value).ok_or_else(|| {
            Error::Storage(format!("malformed transactional offset of group {group}"))
        })?;
        let p = pending.entry((group, pid)).or_default();
        p.epoch = p.epoch.max(epoch);
        p.offsets.insert((topic, partition), committed);
    }
    let mut records: HashMap<String, (Option<consumer::GroupRecord>, Vec<_>)> = HashMap::new();
    for (key, value) in store.load_groups(GroupCf::Consumers)? {
        let (group, member) = decode_consumer_key(&key)
            .ok_or_else(|| Error::Storage("malformed consumer group key".into()))?;
        if !wanted(&group) {
            continue;
        }
        let bad = |e: serde_json::Error| Error::Storage(format!("consumer group {group}: {e}"));
        let entry = records.entry(group.clone()).or_default();
        match member {
            None => entry.0 = Some(serde_json::from_slice(&value).map_err(bad)?),
            Some(m) => entry
                .1
                .push((m, serde_json::from_slice(&value).map_err(bad)?)),
        }
    }
    let consumers = records
        .into_iter()
        .map(|(id, (record, members))| {
            let g = ConsumerGroup::restore(record, members, now, config.consumer_session_timeout);
            (id, g)
        })
        .collect();
    let mut shares = HashMap::new();
    for (key, value) in store.load_groups(GroupCf::ShareGroups)? {
        let id = String::from_utf8(key)
            .map_err(|_| Error::Storage("share group id is not UTF-8".into()))?;
        if !wanted(&id) {
            continue;
        }
        let record = serde_json::from_slice(&value)
            .map_err(|e| Error::Storage(format!("share group {id}: {e}")))?;
        shares.insert(
            id,
            ShareGroup::restore(record, now, config.share_session_timeout),
        );
    }
    Ok(Inner {
        groups,
        consumers,
        offsets,
        pending,
        shares,
        ..Default::default()
    })
}

/// The put (or, with no record, the delete) of a share group's record.
fn share_group_change(group_id: &str, r: Option<&share::ShareGroupRecord>) -> GroupChange {
    GroupChange {
        cf: GroupCf::ShareGroups,
        key: group_id.as_bytes().to_vec(),
        value: r.map(|r| serde_json::to_vec(r).expect("share group record serializes")),
    }
}

/// Consumer groups CF key: u16 length + group, then 0 for the group's record or 1 and the
/// member id for a member's.
fn consumer_key(group: &str, member: Option<&str>) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + group.len() + member.map_or(0, str::len));
    k.extend_from_slice(&(group.len() as u16).to_be_bytes());
    k.extend_from_slice(group.as_bytes());
    match member {
        None => k.push(0),
        Some(m) => {
            k.push(1);
            k.extend_from_slice(m.as_bytes());
        }
    }
    k
}

fn decode_consumer_key(k: &[u8]) -> Option<(String, Option<String>)> {
    let len = u16::from_be_bytes(k.get(..2)?.try_into().ok()?) as usize;
    let group = std::str::from_utf8(k.get(2..2 + len)?).ok()?.to_string();
    match (*k.get(2 + len)?, k.get(3 + len..)?) {
        (0, []) => Some((group, None)),
        (1, m) => Some((group, Some(std::str::from_utf8(m).ok()?.to_string()))),
        _ => None,
    }
}

fn encode_consumer_changes(group_id: &str, changes: Vec<Change>) -> Vec<GroupChange> {
    changes
        .into_iter()
        .map(|c| match c {
            Change::Group(r) => GroupChange {
                cf: GroupCf::Consumers,
                key: consumer_key(group_id, None),
                value: r.map(|r| serde_json::to_vec(&r).expect("group record serializes")),
            },
            Change::Member(id, r) => GroupChange {
                cf: GroupCf::Consumers,
                key: consumer_key(group_id, Some(&id)),
                value: r.map(|r| serde_json::to_vec(&r).expect("member record serializes")),
            },
        })
        .collect()
}

/// An answer now (`Ok`), or a receiver for it, registered under the waiting member.
fn park<T>(
    waiters: &mut HashMap<(String, String), oneshot::Sender<T>>,
    group_id: &str,
    outcome: Outcome<T>,
) -> std::result::Result<T, oneshot::Receiver<T>> {
    match outcome {
        Outcome::Now(r) => Ok(r),
        Outcome::Wait(member) => {
            let (tx, rx) = oneshot::channel();
            waiters.insert((group_id.to_string(), member), tx);
            Err(rx)
        }
    }
}

/// Offsets CF key: u16 length + group, u16 length + topic, partition (i32 BE).
fn offset_key(group: &str, topic: &str, partition: i32) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + group.len() + topic.len());
    for s in [group, topic] {
        k.extend_from_slice(&(s.len() as u16).to_be_bytes());
        k.extend_from_slice(s.as_bytes());
    }
    k.extend_from_slice(&partition.to_be_bytes());
    k
}

/// TxnOffsets CF key: the offset key, then the producer id (i64 BE).
fn txn_offset_key(group: &str, topic: &str, partition: i32, producer_id: i64) -> Vec<u8> {
    let mut k = offset_key(group, topic, partition);
    k.extend_from_slice(&producer_id.to_be_bytes());
    k
}

fn decode_txn_offset_key(k: &[u8]) -> Option<(String, String, i32, i64)> {
    let split = k.len().checked_sub(8)?;
    let (group, topic, partition) = decode_offset_key(&k[..split])?;
    Some((
        group,
        topic,
        partition,
        i64::from_be_bytes(k[split..].try_into().ok()?),
    ))
}

fn decode_offset_key(k: &[u8]) -> Option<(String, String, i32)> {
    let mut pos = 0;
    let mut next = || {
        let len = u16::from_be_bytes(k.get(pos..pos + 2)?.try_into().ok()?) as usize;
        let s = std::str::from_utf8(k.get(pos + 2..pos + 2 + len)?).ok()?;
        pos += 2 + len;
        Some(s.to_string())
    };
    let group = next()?;
    let topic = next()?;
    let partition = i32::from_be_bytes(k.get(pos..pos + 4)?.try_into().ok()?);
    Some((group, topic, partition))
}

/// Offsets CF value: version 0, offset, leader epoch, commit time, then the metadata
/// (a presence byte and UTF-8).
fn encode_committed(c: &Committed) -> Vec<u8> {
    let mut v = Vec::with_capacity(22 + c.metadata.as_ref().map_or(0, |m| m.len()));
    v.push(0);
    v.extend_from_slice(&c.offset.to_be_bytes());
    v.extend_from_slice(&c.leader_epoch.to_be_bytes());
    v.extend_from_slice(&c.commit_ms.to_be_bytes());
    match &c.metadata {
        Some(m) => {
            v.push(1);
            v.extend_from_slice(m.as_bytes());
        }
        None => v.push(0),
    }
    v
}

/// A transaction's pending offsets in one group, and the producer epoch that committed them.
#[derive(Debug, Clone)]
struct Pending {
    epoch: i16,
    offsets: BTreeMap<(String, i32), Committed>,
}

impl Default for Pending {
    fn default() -> Pending {
        Pending {
            epoch: -1,
            offsets: BTreeMap::new(),
        }
    }
}

/// TxnOffsets CF value: version 1, then as [`encode_committed`] with the producer epoch
/// (i16) before the metadata. Version 0 (an offsets value, no epoch) is what releases
/// before epochs were kept wrote; it reads as epoch -1, which any marker passes.
fn encode_pending(c: &Committed, producer_epoch: i16) -> Vec<u8> {
    let mut v = encode_committed(c);
    v[0] = 1;
    let at = 21;
    v.splice(at..at, producer_epoch.to_be_bytes());
    v
}

fn decode_pending(v: &[u8]) -> Option<(Committed, i16)> {
    match *v.first()? {
        0 => Some((decode_committed(v)?, -1)),
        1 => {
            let epoch = i16::from_be_bytes(v.get(21..23)?.try_into().ok()?);
            let mut rest = v[..21].to_vec();
            rest[0] = 0;
            rest.extend_from_slice(v.get(23..)?);
            Some((decode_committed(&rest)?, epoch))
        }
        _ => None,
    }
}

fn decode_committed(v: &[u8]) -> Option<Committed> {
    if *v.first()? != 0 {
        return None;
    }
    let offset = i64::from_be_bytes(v.get(1..9)?.try_into().ok()?);
    let leader_epoch = i32::from_be_bytes(v.get(9..13)?.try_into().ok()?);
    let commit_ms = i64::from_be_bytes(v.get(13..21)?.try_into().ok()?);
    let metadata = match *v.get(21)? {
        0 => None,
        _ => Some(String::from_utf8(v.get(22..)?.to_vec()).ok()?),
    };
    Some(Committed {
        offset,
        leader_epoch,
        metadata,
        commit_ms,
    })
}

fn encode_change(group_id: &str, p: Persist) -> GroupChange {
    match p {
        Persist::Group(record) => GroupChange {
            cf: GroupCf::Groups,
            key: group_id.as_bytes().to_vec(),
            value: record.map(|r| serde_json::to_vec(&r).expect("group record serializes")),
        },
    }
}

fn encode_offset_change(group_id: &str, c: OffsetChange) -> GroupChange {
    GroupChange {
        cf: GroupCf::Offsets,
        key: offset_key(group_id, &c.topic, c.partition),
        value: c.value.as_ref().map(encode_committed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStore;

    fn config() -> CoordinatorConfig {
        CoordinatorConfig {
            limits: GroupLimits {
                initial_rebalance_delay: Duration::ZERO,
                min_session_timeout: Duration::from_secs(6),
                max_session_timeout: Duration::from_secs(1800),
            },
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            retention_check_interval: Duration::from_secs(600),
            consumer_session_timeout: Duration::from_secs(45),
            share_session_timeout: Duration::from_secs(45),
        }
    }

    fn join(member: &str) -> Join {
        Join {
            member_id: member.to_string(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"m"))],
            require_known_member_id: false,
        }
    }

    #[test]
    fn keys_and_values_round_trip() {
        let k = offset_key("g/1", "topic", 7);
        assert_eq!(
            decode_offset_key(&k),
            Some(("g/1".into(), "topic".into(), 7))
        );
        for metadata in [None, Some(String::new()), Some("hello".to_string())] {
            let c = Committed {
                offset: 42,
                leader_epoch: 3,
                metadata,
                commit_ms: 1_700_000_000_000,
            };
            assert_eq!(decode_committed(&encode_committed(&c)), Some(c));
        }
        assert_eq!(decode_committed(&[9, 0, 0]), None);
    }

    #[tokio::test(start_paused = true)]
    async fn joins_park_until_the_group_answers_and_state_survives_reopen() {
        let store = Arc::new(MemoryStore::default());
        let c = Arc::new(Coordinator::open(store.clone(), config()).unwrap());
        let (_tx, rx) = watch::channel(false);
        tokio::spawn(c.clone().run(rx));
        let a = c.join("g", join("")).await;
        assert_eq!((a.error, a.generation), (None, 1));
        let s = c
            .sync(
                "g",
                &a.member_id,
                None,
                1,
                None,
                None,
                vec![(a.member_id.clone(), Bytes::from("A"))],
            )
            .await;
        assert_eq!(s.assignment, "A");
        // a second member parks until a rejoins
        let c2 = c.clone();
        let b = tokio::spawn(async move { c2.join("g", join("")).await });
        tokio::task::yield_now().await;
        assert!(!b.is_finished());
        assert_eq!(
            c.heartbeat("g", &a.member_id, None, 1),
            Err(ResponseError::RebalanceInProgress)
        );
        let a2 = c.join("g", join(&a.member_id)).await;
        let b = b.await.unwrap();
        assert_eq!((a2.generation, b.generation), (2, 2));
        c.commit(
            "g",
            &a.member_id,
            None,
            2,
            vec![(
                "t".into(),
                0,
                Committed {
                    offset: 10,
                    leader_epoch: -1,
                    metadata: Some("m".into()),
                    commit_ms: now_ms(),
                },
            )],
        )
        .await
        .unwrap_err(); // CompletingRebalance: REBALANCE_IN_PROGRESS
        let c_after = Coordinator::open(store.clone(), config()).unwrap();
        assert_eq!(c_after.committed("g", None).unwrap().len(), 0);
        let simple = c
            .commit(
                "solo",
                "",
                None,
                -1,
                vec![(
                    "t".into(),
                    0,
                    Committed {
                        offset: 10,
                        leader_epoch: -1,
                        metadata: Some("m".into()),
                        commit_ms: now_ms(),
                    },
                )],
            )
            .await;
        assert_eq!(simple, Ok(()));
        let reopened = Coordinator::open(store, config()).unwrap();
        let got = reopened
            .committed("solo", Some(vec![("t".into(), vec![0, 1])]))
            .unwrap();
        assert_eq!(got[0].2.as_ref().map(|c| c.offset), Some(10));
        assert_eq!(got[1].2, None);
        let d = reopened.describe("g").unwrap().unwrap();
        assert_eq!(
            d.members.len(),
            1,
            "the group record of generation 1 came back"
        );
        assert_eq!(reopened.delete_group("solo").await, Ok(()));
        assert!(reopened.committed("solo", None).unwrap().is_empty());
        assert_eq!(
            reopened.delete_group("g").await,
            Err(ResponseError::NonEmptyGroup)
        );
        assert_eq!(
            reopened.delete_group("nope").await,
            Err(ResponseError::GroupIdNotFound)
        );
    }

    /// A [`GroupLog`] that answers as told and applies what it accepts to the store, as
    /// the replicated one does once the ISR holds the records.
    struct Answering {
        store: Arc<MemoryStore>,
        accept: std::sync::atomic::AtomicBool,
    }

    impl GroupLog for Answering {
        fn check(&self, _group: &str) -> std::result::Result<(), ResponseError> {
            Ok(())
        }

        fn loading(&self) -> bool {
            false
        }

        fn epoch(&self, _group: &str) -> Option<i32> {
            Some(0)
        }
        fn partition_of(&self, _group: &str) -> Option<i32> {
            Some(0)
        }
        fn check_partition(&self, _partition: i32) -> std::result::Result<(), ResponseError> {
            Ok(())
        }
        fn submit(&self, _group: &str, changes: Vec<GroupChange>) -> oneshot::Receiver<bool> {
            let (tx, rx) = oneshot::channel();
            let ok = self.accept.load(std::sync::atomic::Ordering::SeqCst);
            if ok {
                self.store.write_groups(&changes).unwrap();
            }
            tx.send(ok).unwrap();
            rx
        }
    }

    /// A [`GroupLog`] for a broker that coordinates no group: its partitions load, or
    /// another broker leads them.
    struct Elsewhere(ResponseError);

    impl GroupLog for Elsewhere {
        fn check(&self, _group: &str) -> std::result::Result<(), ResponseError> {
            Err(self.0)
        }

        fn loading(&self) -> bool {
            self.0 == ResponseError::CoordinatorLoadInProgress
        }

        fn epoch(&self, _group: &str) -> Option<i32> {
            None
        }
        fn partition_of(&self, _group: &str) -> Option<i32> {
            None
        }
        fn check_partition(&self, _partition: i32) -> std::result::Result<(), ResponseError> {
            Err(self.0)
        }
        fn submit(&self, _group: &str, _changes: Vec<GroupChange>) -> oneshot::Receiver<bool> {
            unreachable!("nothing is written for a group this broker does not coordinate")
        }
    }

    #[tokio::test]
    async fn a_group_coordinated_elsewhere_gets_the_routing_error_from_every_entry_point() {
        for e in [
            ResponseError::NotCoordinator,
            ResponseError::CoordinatorLoadInProgress,
        ] {
            let c = Coordinator::open(Arc::new(MemoryStore::default()), config()).unwrap();
            c.replicate_through(Arc::new(Elsewhere(e)));
            let j = c.join("g", join("m")).await;
            assert_eq!((j.error, j.member_id.as_str()), (Some(e), "m"));
            let s = c.sync("g", "m", None, 1, None, None, vec![]).await;
            assert_eq!(s.error, Some(e));
            assert_eq!(c.heartbeat("g", "m", None, 1), Err(e));
            assert_eq!(c.leave("g", &[("m".into(), None)]), Err(e));
            assert_eq!(
                c.commit("g", "", None, -1, offset(1)).await,
                Err(CommitError::Routing(e))
            );
            assert_eq!(
                c.commit("g", "", None, -1, Vec::new()).await,
                Err(CommitError::Routing(e)),
                "asked with nothing to commit, it still says where the group is"
            );
            assert_eq!(c.committed("g", None), Err(e));
            assert_eq!(
                c.delete_offsets("g", &[("t".into(), vec![0])]).await,
                Err(e)
            );
            assert_eq!(c.describe("g").err(), Some(e));
            assert_eq!(c.delete_group("g").await, Err(e));
            assert_eq!(c.consumer_describe("g").err(), Some(e));
            // Routing comes before the request's own checks, as the handlers answered it.
            let invalid = Heartbeat {
                member_id_required: true,
                ..Default::default()
            };
            let h = c.consumer_heartbeat("g", invalid, &|_: &str| Some(1)).await;
            assert_eq!(h.error, Some((e, e.to_string())));
            assert!(c.list().is_empty(), "no group was made up");
        }
    }

    #[tokio::test]
    async fn consumer_heartbeats_are_checked_before_the_group_is_looked_at() {
        let c = Coordinator::open(Arc::new(MemoryStore::default()), config()).unwrap();
        let no_id = Heartbeat {
            member_id_required: true,
            ..consumer_hb("", 0)
        };
        let r = c.consumer_heartbeat("g", no_id, &|_: &str| Some(1)).await;
        assert_eq!(
            r.error,
            Some((
                ResponseError::InvalidRequest,
                "MemberId can't be empty.".to_string()
            ))
        );
        let no_subscription = Heartbeat {
            subscribed: None,
            ..consumer_hb("a", 0)
        };
        let r = c
            .consumer_heartbeat("g", no_subscription, &|_: &str| Some(1))
            .await;
        assert_eq!(r.error.map(|e| e.0), Some(ResponseError::InvalidRequest));
        assert!(c.list().is_empty(), "an invalid heartbeat joins nobody");
        let ok = c
            .consumer_heartbeat("g", consumer_hb("a", 0), &|_: &str| Some(1))
            .await;
        assert_eq!(ok.error, None);
    }

    /// A share group outlives its coordinator with its epoch, topics and members, and
    /// deleting it removes its record.
    #[tokio::test]
    async fn share_groups_survive_reopen_with_their_members() {
        let store = Arc::new(MemoryStore::default());
        let c = Coordinator::open(store.clone(), config()).unwrap();
        let topics = |t: &str| (t == "t").then_some(2);
        let join = ShareHeartbeat {
            member_id: "m".into(),
            subscribed: Some(vec!["t".into()]),
            ..ShareHeartbeat::default()
        };
        let r = c.share_heartbeat("sg", join, &topics).await;
        assert_eq!((r.error, r.epoch), (None, 1));
        let c = Coordinator::open(store.clone(), config()).unwrap();
        let d = c
            .share_describe("sg")
            .unwrap()
            .expect("still a share group");
        assert_eq!(
            (d.state, d.epoch, d.topics),
            ("Stable", 1, vec!["t".to_string()])
        );
        assert_eq!((d.members[0].id.as_str(), d.members[0].epoch), ("m", 1));
        // The member carries on at its epoch and is sent its assignment again.
        let again = ShareHeartbeat {
            member_id: "m".into(),
            epoch: 1,
            ..ShareHeartbeat::default()
        };
        let r = c.share_heartbeat("sg", again, &topics).await;
        assert_eq!((r.error, r.epoch), (None, 1));
        assert_eq!(r.assignment.map(|a| a.len()), Some(2));
        let leave = ShareHeartbeat {
            member_id: "m".into(),
            epoch: -1,
            ..ShareHeartbeat::default()
        };
        c.share_heartbeat("sg", leave, &topics).await;
        assert_eq!(c.delete_group("sg").await, Ok(()));
        let c = Coordinator::open(store, config()).unwrap();
        assert!(c.share_describe("sg").unwrap().is_none());
    }

    /// A marker reaching a partition whose groups are still loading must be refused (the
    /// transaction coordinator retries it), not applied to nothing: the fault harness saw
    /// a new group coordinator drop a COMMIT that way, and the copier read its input twice.
    #[tokio::test]
    async fn a_marker_for_a_partition_still_loading_is_refused_and_changes_nothing() {
        let store = Arc::new(MemoryStore::default());
        let c = Coordinator::open(store.clone(), config()).unwrap();
        c.txn_commit("g", (7, 5), "", None, -1, offset(10))
            .await
            .unwrap();
        let c = Coordinator::open(store, config()).unwrap();
        c.replicate_through(Arc::new(Elsewhere(
            ResponseError::CoordinatorLoadInProgress,
        )));
        assert!(matches!(
            c.complete_txn_offsets(0, 7, 6, true).await,
            Err(Error::Transaction(ResponseError::CoordinatorLoadInProgress))
        ));
        c.load(&|_| true).unwrap();
        assert!(
            c.has_pending("g", "t", 0),
            "the offsets wait for the retried marker"
        );
    }

    /// A marker from a coordinator that lost the transactional id, for a transaction
    /// finished long ago, must not commit the offsets of the transaction now open (the
    /// fault harness caught a restarted broker doing so): markers older than the pending
    /// offsets change nothing, also after the coordinator reloads them from the store.
    #[tokio::test]
    async fn a_marker_older_than_the_pending_offsets_changes_nothing() {
        let store = Arc::new(MemoryStore::default());
        let c = Coordinator::open(store.clone(), config()).unwrap();
        c.txn_commit("g", (7, 5), "", None, -1, offset(10))
            .await
            .unwrap();
        let stale = |r: Result<()>| {
            matches!(
                r,
                Err(Error::Transaction(ResponseError::InvalidProducerEpoch))
            )
        };
        assert!(stale(c.complete_txn_offsets(0, 7, 4, true).await));
        assert!(c.has_pending("g", "t", 0));
        assert!(c.committed("g", None).unwrap().is_empty());

        let c = Coordinator::open(store, config()).unwrap();
        assert!(c.has_pending("g", "t", 0));
        assert!(stale(c.complete_txn_offsets(0, 7, 4, false).await));
        // The transaction's own marker: its epoch, or one more (transaction version 2).
        c.complete_txn_offsets(0, 7, 6, true).await.unwrap();
        assert!(!c.has_pending("g", "t", 0));
        let committed = c.committed("g", None).unwrap();
        assert_eq!(committed.len(), 1);
        assert_eq!(committed[0].2.as_ref().map(|c| c.offset), Some(10));
    }

    #[test]
    fn pending_offsets_of_earlier_releases_read_without_an_epoch() {
        let c = offset(42).remove(0).2;
        assert_eq!(decode_pending(&encode_committed(&c)), Some((c.clone(), -1)));
        let with_meta = Committed {
            metadata: Some("m".into()),
            ..c
        };
        assert_eq!(
            decode_pending(&encode_pending(&with_meta, 9)),
            Some((with_meta, 9))
        );
    }

    fn offset(o: i64) -> Vec<(String, i32, Committed)> {
        vec![(
            "t".into(),
            0,
            Committed {
                offset: o,
                leader_epoch: -1,
                metadata: None,
                commit_ms: now_ms(),
            },
        )]
    }

    #[tokio::test]
    async fn replicated_writes_answer_once_the_log_does_and_groups_load_per_partition() {
        let store = Arc::new(MemoryStore::default());
        let c = Coordinator::open(store.clone(), config()).unwrap();
        c.commit("a", "", None, -1, offset(1)).await.unwrap();
        let log = Arc::new(Answering {
            store: store.clone(),
            accept: true.into(),
        });
        c.replicate_through(log.clone());
        assert!(c.list().is_empty(), "nothing is coordinated until loaded");
        c.commit("b", "", None, -1, offset(2)).await.unwrap();
        log.accept.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            c.commit("b", "", None, -1, offset(3)).await,
            Err(CommitError::Refused(ResponseError::CoordinatorNotAvailable)),
            "a write the log refused is not acknowledged"
        );
        // Reloading "b" (as the partition's reload does) drops what was not written.
        assert_eq!(c.load(&|g| g == "b").unwrap(), 1);
        let got = c.committed("b", None).unwrap();
        assert_eq!(got[0].2.as_ref().map(|c| c.offset), Some(2));
        assert!(
            c.committed("a", None).unwrap().is_empty(),
            "a is not loaded"
        );
        assert_eq!(c.load(&|g| g == "a").unwrap(), 1);
        assert_eq!(
            c.committed("a", None).unwrap()[0]
                .2
                .as_ref()
                .map(|c| c.offset),
            Some(1)
        );
        c.unload(&|g| g == "a");
        assert!(c.committed("a", None).unwrap().is_empty());
        assert_eq!(
            c.committed("b", None).unwrap().len(),
            1,
            "unload spares other groups"
        );
    }

    fn consumer_hb(member: &str, epoch: i32) -> Heartbeat {
        Heartbeat {
            member_id: member.to_string(),
            epoch,
            subscribed: (epoch == 0).then(|| vec!["t".to_string()]),
            rebalance_timeout: Duration::from_secs(30),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn consumer_groups_survive_a_reopen_and_a_refused_write_is_not_answered() {
        let parts = |t: &str| (t == "t").then_some(3);
        let store = Arc::new(MemoryStore::default());
        let c = Coordinator::open(store.clone(), config()).unwrap();
        let a = c.consumer_heartbeat("g", consumer_hb("a", 0), &parts).await;
        assert_eq!(a.error, None);
        assert_eq!(a.assignment.as_ref().map(|s| s.len()), Some(3));

        // A restarted coordinator knows the member, its epoch and its partitions.
        let c = Coordinator::open(store.clone(), config()).unwrap();
        let d = c.consumer_describe("g").unwrap().expect("restored");
        assert_eq!((d.state, d.epoch, d.members.len()), ("Stable", a.epoch, 1));
        assert_eq!(d.members[0].0.assigned, a.assignment.clone().unwrap());
        let again = c
            .consumer_heartbeat("g", consumer_hb("a", a.epoch), &parts)
            .await;
        assert_eq!((again.error, again.epoch), (None, a.epoch), "not fenced");

        // Replicated: a join the log refuses is not acknowledged, and the reload forgets it.
        let log = Arc::new(Answering {
            store: store.clone(),
            accept: false.into(),
        });
        c.replicate_through(log.clone());
        assert_eq!(c.load(&|g| g == "g").unwrap(), 1);
        let b = c.consumer_heartbeat("g", consumer_hb("b", 0), &parts).await;
        assert_eq!(
            b.error.map(|e| e.0),
            Some(ResponseError::CoordinatorNotAvailable)
        );
        c.load(&|g| g == "g").unwrap();
        let d = c.consumer_describe("g").unwrap().unwrap();
        assert_eq!((d.epoch, d.members.len()), (a.epoch, 1));

        // The member leaves and the group is deleted: no record of it is left.
        log.accept.store(true, std::sync::atomic::Ordering::SeqCst);
        let left = c
            .consumer_heartbeat("g", consumer_hb("a", -1), &parts)
            .await;
        assert_eq!(left.error, None);
        assert_eq!(c.delete_group("g").await, Ok(()));
        assert!(store.load_groups(GroupCf::Consumers).unwrap().is_empty());
        assert!(Coordinator::open(store, config())
            .unwrap()
            .consumer_describe("g")
            .unwrap()
            .is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn offsets_of_classic_and_consumer_groups_are_stored_as_before_and_survive_a_reopen() {
        let store = Arc::new(MemoryStore::default());
        let c = Arc::new(Coordinator::open(store.clone(), config()).unwrap());
        let (_tx, rx) = watch::channel(false);
        tokio::spawn(c.clone().run(rx));
        let committed = |offset| Committed {
            offset,
            leader_epoch: 4,
            metadata: Some("m".into()),
            commit_ms: 1_700_000_000_000,
        };
        let commit = |offset| vec![("t".to_string(), 0, committed(offset))];
        let a = c.join("classic", join("")).await;
        c.sync("classic", &a.member_id, None, 1, None, None, vec![])
            .await;
        c.commit("classic", &a.member_id, None, 1, commit(7))
            .await
            .unwrap();
        let parts = |t: &str| (t == "t").then_some(1);
        let m = c
            .consumer_heartbeat("kip848", consumer_hb("m", 0), &parts)
            .await;
        c.commit("kip848", "m", None, m.epoch, commit(9))
            .await
            .unwrap();

        // The bytes a data dir of the current release holds, spelled out: key = u16 length
        // + group, u16 length + topic, partition; value = version 0, offset, leader epoch,
        // commit time, then a presence byte and the metadata.
        let record = |group: &str, offset: i64| {
            let mut k = vec![0, group.len() as u8];
            k.extend_from_slice(group.as_bytes());
            k.extend_from_slice(&[0, 1, b't', 0, 0, 0, 0]);
            let mut v = vec![0];
            v.extend_from_slice(&offset.to_be_bytes());
            v.extend_from_slice(&4i32.to_be_bytes());
            v.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
            v.extend_from_slice(&[1, b'm']);
            (k, v)
        };
        let mut want = vec![record("classic", 7), record("kip848", 9)];
        want.sort();
        assert_eq!(store.load_groups(GroupCf::Offsets).unwrap(), want);
        let classic_records: Vec<Vec<u8>> = store
            .load_groups(GroupCf::Groups)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            classic_records,
            vec![b"classic".to_vec()],
            "a KIP-848 group writes no classic group record"
        );

        let reopened = Coordinator::open(store, config()).unwrap();
        for (group, offset) in [("classic", 7), ("kip848", 9)] {
            assert_eq!(
                reopened.committed(group, None),
                Ok(vec![("t".to_string(), 0, Some(committed(offset)))]),
                "{group}"
            );
        }
        let d = reopened.describe("classic").unwrap().unwrap();
        assert_eq!((d.state, d.members.len()), (GroupState::Stable, 1));
        let k = reopened.consumer_describe("kip848").unwrap().unwrap();
        assert_eq!(k.members.len(), 1);
        let listed: Vec<(String, &str)> = reopened
            .list()
            .into_iter()
            .map(|l| (l.id, l.group_type))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("classic".to_string(), "classic"),
                ("kip848".to_string(), "consumer")
            ]
        );
        assert_eq!(
            reopened
                .commit("kip848", "m", None, m.epoch, commit(10))
                .await,
            Ok(()),
            "the KIP-848 member commits on with its epoch"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn offsets_expire_a_retention_after_their_group_became_empty() {
        let config = CoordinatorConfig {
            consumer_session_timeout: Duration::from_secs(1800),
            ..config()
        };
        let retention = config.offsets_retention;
        let c = Arc::new(Coordinator::open(Arc::new(MemoryStore::default()), config).unwrap());
        let (_tx, rx) = watch::channel(false);
        tokio::spawn(c.clone().run(rx));
        // Committed long ago: only how long the group has been empty decides.
        let old = || {
            vec![(
                "t".to_string(),
                0,
                Committed {
                    offset: 1,
                    leader_epoch: -1,
                    metadata: None,
                    commit_ms: 0,
                },
            )]
        };
        c.commit("solo", "", None, -1, old()).await.unwrap();
        let a = c
            .join(
                "classic",
                Join {
                    session_timeout: Duration::from_secs(1800),
                    ..join("")
                },
            )
            .await;
        c.sync("classic", &a.member_id, None, 1, None, None, vec![])
            .await;
        c.commit("classic", &a.member_id, None, 1, old())
            .await
            .unwrap();
        let parts = |t: &str| (t == "t").then_some(1);
        let m = c
            .consumer_heartbeat("kip848", consumer_hb("m", 0), &parts)
            .await;
        c.commit("kip848", "m", None, m.epoch, old()).await.unwrap();

        // Every member stays for a retention and a sweep.
        let step = Duration::from_secs(1000);
        let mut waited = Duration::ZERO;
        while waited < retention + config.retention_check_interval {
            tokio::time::sleep(step).await;
            waited += step;
            assert_eq!(c.heartbeat("classic", &a.member_id, None, 1), Ok(()));
            let h = c
                .consumer_heartbeat("kip848", consumer_hb("m", m.epoch), &parts)
                .await;
            assert_eq!(h.error, None);
        }
        assert_eq!(c.committed("solo", None), Ok(vec![]));
        assert!(
            c.describe("solo").unwrap().is_none(),
            "a group with nothing left is forgotten"
        );
        assert_eq!(
            c.committed("classic", None).unwrap().len(),
            1,
            "a classic group with a member keeps its offsets"
        );
        // As before offsets were kept apart: a KIP-848 group's offsets count from their
        // first commit, members or not (Kafka would keep those of subscribed topics).
        assert_eq!(c.committed("kip848", None), Ok(vec![]));

        c.leave("classic", &[(a.member_id.clone(), None)]).unwrap();
        tokio::time::sleep(retention / 2).await;
        assert_eq!(
            c.committed("classic", None).unwrap().len(),
            1,
            "empty for less than the retention"
        );
        tokio::time::sleep(retention / 2 + config.retention_check_interval).await;
        assert_eq!(c.committed("classic", None), Ok(vec![]));
        assert!(
            c.describe("classic").unwrap().is_none(),
            "an empty classic group with no offsets is deleted"
        );
    }

    #[test]
    fn consumer_keys_round_trip() {
        for (g, m) in [("g", None), ("g\0x", Some("m")), ("", Some(""))] {
            let k = consumer_key(g, m);
            assert_eq!(
                decode_consumer_key(&k),
                Some((g.to_string(), m.map(str::to_string)))
            );
        }
        assert_eq!(decode_consumer_key(&[0, 1, b'g', 0, 7]), None);
        assert_eq!(decode_consumer_key(&[0, 5, b'g']), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_session_rebalances_through_the_timer_task() {
        let c = Arc::new(Coordinator::open(Arc::new(MemoryStore::default()), config()).unwrap());
        let (_tx, rx) = watch::channel(false);
        tokio::spawn(c.clone().run(rx));
        let a = c.join("g", join("")).await;
        c.sync("g", &a.member_id, None, 1, None, None, vec![]).await;
        tokio::time::sleep(Duration::from_secs(11)).await;
        let d = c.describe("g").unwrap().unwrap();
        assert_eq!(d.state, GroupState::Empty);
        assert!(d.members.is_empty());
    }
}
