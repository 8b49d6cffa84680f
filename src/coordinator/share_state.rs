//! The share coordinator (KIP-932): the persisted state of share partitions, kept in
//! `__share_group_state` as Kafka keeps it. A share partition's leader holds its records'
//! states in memory and writes them here (WriteShareGroupState) before it answers an
//! acknowledgement; a broker that comes to lead the partition reads them back
//! (ReadShareGroupState). The state of share partition `group:topic-id:partition` lives in
//! the partition of `__share_group_state` that key hashes to, and the leader of that
//! partition coordinates it.
//!
//! The pure part is [`ShareState`] and [`apply_write`], Kafka's merge of a write into the
//! stored state: a write names the start offset and the runs of records it changed, newer
//! runs replace what they cover, and everything below the start offset is dropped. A write
//! from an older leader epoch or state epoch is fenced. The async shell,
//! [`ShareCoordinator`], holds one key pending while its change is written through the
//! [`GroupLog`] (straight to the store without one) and keeps what was committed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use uuid::Uuid;

use super::{Coordinated, GroupLog};
use crate::error::Result;
use crate::storage::{GroupCf, GroupChange, GroupStore};

/// `[first, last]` records with one delivery state (Kafka's codes: 0 available,
/// 2 acknowledged, 4 archived) and delivery count.
pub type Run = (i64, i64, i8, i16);

/// What the share coordinator keeps per share partition (Kafka's ShareSnapshot value).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareState {
    pub state_epoch: i32,
    /// The leader epoch of the last write; -1 before any.
    pub leader_epoch: i32,
    /// The share-partition start offset; -1 when initialized without one (the leader then
    /// picks it from `share.auto.offset.reset`).
    pub start: i64,
    /// Runs in offset order, none below `start`, none overlapping.
    pub runs: Vec<Run>,
}

/// One WriteShareGroupState partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    /// -1 leaves the start offset as it is.
    pub start: i64,
    pub runs: Vec<Run>,
}

/// The coordinator key of a share partition: Kafka's `groupId:topicId:partition`. It
/// chooses the `__share_group_state` partition and keys the stored state.
pub fn key(group: &str, topic_id: Uuid, partition: i32) -> String {
    format!("{group}:{topic_id}:{partition}")
}

/// The group, topic id and partition of a coordinator key (the group may hold ':').
pub fn parse_key(key: &str) -> Option<(&str, Uuid, i32)> {
    let mut parts = key.rsplitn(3, ':');
    let partition = parts.next()?.parse().ok()?;
    let topic_id = parts.next()?.parse().ok()?;
    Some((parts.next()?, topic_id, partition))
}

/// Kafka's write: fenced when from an older state epoch (FENCED_STATE_EPOCH) or leader
/// epoch (FENCED_LEADER_EPOCH); else the runs written replace the stored ones they cover
/// and the state is cut at the (new) start offset. Runs must each have first <= last.
pub fn apply_write(
    old: Option<&ShareState>,
    w: &StateWrite,
) -> std::result::Result<ShareState, ResponseError> {
    if w.runs.iter().any(|r| r.0 > r.1) {
        return Err(ResponseError::InvalidRequest);
    }
    let base = old.cloned().unwrap_or(ShareState {
        state_epoch: w.state_epoch,
        leader_epoch: -1,
        start: -1,
        runs: Vec::new(),
    });
    if w.state_epoch < base.state_epoch {
        return Err(ResponseError::FencedStateEpoch);
    }
    if w.leader_epoch < base.leader_epoch {
        return Err(ResponseError::FencedLeaderEpoch);
    }
    let start = if w.start >= 0 { w.start } else { base.start };
    let mut written = w.runs.clone();
    written.sort_unstable();
    let mut runs: Vec<Run> = Vec::new();
    // What is left of each stored run outside every written one.
    for &(first, last, state, count) in &base.runs {
        let mut from = first;
        for &(wf, wl, _, _) in written.iter().filter(|r| r.1 >= first && r.0 <= last) {
            if wf > from {
                runs.push((from, wf - 1, state, count));
            }
            from = from.max(wl + 1);
        }
        if from <= last {
            runs.push((from, last, state, count));
        }
    }
    runs.extend(written);
    runs.sort_unstable();
    let runs = runs
        .into_iter()
        .filter(|r| r.1 >= start)
        .map(|(f, l, s, c)| (f.max(start), l, s, c))
        .collect();
    Ok(ShareState {
        state_epoch: w.state_epoch,
        leader_epoch: w.leader_epoch,
        start,
        runs,
    })
}

/// Kafka's initialize: a fresh state at `start` (-1: none yet), unless the stored one has a
/// newer state epoch (FENCED_STATE_EPOCH).
pub fn apply_initialize(
    old: Option<&ShareState>,
    state_epoch: i32,
    start: i64,
) -> std::result::Result<ShareState, ResponseError> {
    if old.is_some_and(|o| state_epoch < o.state_epoch) {
        return Err(ResponseError::FencedStateEpoch);
    }
    Ok(ShareState {
        state_epoch,
        leader_epoch: -1,
        start,
        runs: Vec::new(),
    })
}

/// Kafka's read by a partition's leader: fenced (FENCED_LEADER_EPOCH) when from an older
/// leader epoch than the state's; a newer leader epoch is kept, so the previous leader's
/// writes are fenced from then on.
pub fn apply_leader_read(
    old: &ShareState,
    leader_epoch: i32,
) -> std::result::Result<ShareState, ResponseError> {
    if leader_epoch < old.leader_epoch {
        return Err(ResponseError::FencedLeaderEpoch);
    }
    Ok(ShareState {
        leader_epoch,
        ..old.clone()
    })
}

const FORMAT_VERSION: u8 = 0;
const RUN_BYTES: usize = 8 + 8 + 1 + 2;

/// The stored value: a version byte, the epochs, the start, then the runs.
pub fn encode(s: &ShareState) -> Vec<u8> {
    let mut out = Vec::with_capacity(21 + s.runs.len() * RUN_BYTES);
    out.push(FORMAT_VERSION);
    out.extend_from_slice(&s.state_epoch.to_be_bytes());
    out.extend_from_slice(&s.leader_epoch.to_be_bytes());
    out.extend_from_slice(&s.start.to_be_bytes());
    out.extend_from_slice(&(s.runs.len() as u32).to_be_bytes());
    for &(first, last, state, count) in &s.runs {
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&last.to_be_bytes());
        out.push(state as u8);
        out.extend_from_slice(&count.to_be_bytes());
    }
    out
}

pub fn decode(v: &[u8]) -> Option<ShareState> {
    let (&version, rest) = v.split_first()?;
    if version != FORMAT_VERSION || rest.len() < 20 {
        return None;
    }
    let i32_at = |b: &[u8]| i32::from_be_bytes(b[..4].try_into().unwrap());
    let i64_at = |b: &[u8]| i64::from_be_bytes(b[..8].try_into().unwrap());
    let n = u32::from_be_bytes(rest[16..20].try_into().unwrap()) as usize;
    let body = &rest[20..];
    if body.len() != n.checked_mul(RUN_BYTES)? {
        return None;
    }
    let runs = body
        .chunks_exact(RUN_BYTES)
        .map(|c| {
            (
                i64_at(c),
                i64_at(&c[8..]),
                c[16] as i8,
                i16::from_be_bytes([c[17], c[18]]),
            )
        })
        .collect();
    Some(ShareState {
        state_epoch: i32_at(rest),
        leader_epoch: i32_at(&rest[4..]),
        start: i64_at(&rest[8..]),
        runs,
    })
}

/// Holds the share states of the `__share_group_state` partitions this broker leads.
pub struct ShareCoordinator {
    states: Mutex<HashMap<String, ShareState>>,
    /// Keys whose change is being written: the next change of one waits.
    pending: Mutex<HashSet<String>>,
    written: Notify,
    store: Arc<dyn GroupStore>,
    log: OnceLock<Arc<dyn GroupLog>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ShareCoordinator {
    pub fn new(store: Arc<dyn GroupStore>) -> ShareCoordinator {
        ShareCoordinator {
            states: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashSet::new()),
            written: Notify::new(),
            store,
            log: OnceLock::new(),
        }
    }

    /// Replicates changes through `log` (set once, when the broker starts its cluster).
    pub fn replicate_through(&self, log: Arc<dyn GroupLog>) {
        let _ = self.log.set(log);
        self.unload(&|_| true);
    }

    fn check(&self, key: &str) -> std::result::Result<(), ResponseError> {
        match self.log.get() {
            Some(log) => log.check(key),
            None => Ok(()),
        }
    }

    /// The stored state of `key` (None: never initialized or written).
    pub fn read(&self, key: &str) -> std::result::Result<Option<ShareState>, ResponseError> {
        self.check(key)?;
        Ok(lock(&self.states).get(key).cloned())
    }

    /// A partition leader's read of `key` (see [`apply_leader_read`]): None when never
    /// initialized or written.
    pub async fn read_as_leader(
        &self,
        key: &str,
        leader_epoch: i32,
    ) -> std::result::Result<Option<ShareState>, ResponseError> {
        match self.read(key)? {
            None => return Ok(None),
            Some(s) if s.leader_epoch == leader_epoch => return Ok(Some(s)),
            Some(s) => {
                apply_leader_read(&s, leader_epoch)?;
            }
        }
        self.change(key, |old| match old {
            Some(o) => apply_leader_read(o, leader_epoch).map(Some),
            None => Ok(None),
        })
        .await?;
        self.read(key)
    }

    /// Merges a write into `key`'s state (see [`apply_write`]) and answers once committed.
    pub async fn write(&self, key: &str, w: StateWrite) -> std::result::Result<(), ResponseError> {
        self.change(key, |old| apply_write(old, &w).map(Some)).await
    }

    /// Starts `key` afresh at `start` (see [`apply_initialize`]).
    pub async fn initialize(
        &self,
        key: &str,
        state_epoch: i32,
        start: i64,
    ) -> std::result::Result<(), ResponseError> {
        self.change(key, |old| {
            apply_initialize(old, state_epoch, start).map(Some)
        })
        .await
    }

    /// Removes `key`'s state (a tombstone), if it has one.
    pub async fn delete(&self, key: &str) -> std::result::Result<(), ResponseError> {
        if self.read(key)?.is_none() {
            return Ok(());
        }
        self.change(key, |_| Ok(None)).await
    }

    /// Computes `key`'s next state from the committed one, writes it and keeps it once
    /// committed; one change per key at a time, in order.
    async fn change(
        &self,
        key: &str,
        next: impl FnOnce(Option<&ShareState>) -> std::result::Result<Option<ShareState>, ResponseError>,
    ) -> std::result::Result<(), ResponseError> {
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            self.check(key)?;
            if lock(&self.pending).insert(key.to_string()) {
                break;
            }
            written.await;
        }
        let result = self.write_through(key, next).await;
        lock(&self.pending).remove(key);
        self.written.notify_waiters();
        result
    }

    async fn write_through(
        &self,
        key: &str,
        next: impl FnOnce(Option<&ShareState>) -> std::result::Result<Option<ShareState>, ResponseError>,
    ) -> std::result::Result<(), ResponseError> {
        let old = lock(&self.states).get(key).cloned();
        let new = next(old.as_ref())?;
        let change = GroupChange {
            cf: GroupCf::ShareState,
            key: key.as_bytes().to_vec(),
            value: new.as_ref().map(encode),
        };
        let ok = match self.log.get() {
            Some(log) => log.submit(key, vec![change]).await.unwrap_or(false),
            None => self.store.write_groups(&[change]).is_ok(),
        };
        if !ok {
            // The partition is reloaded from the log, or has a new leader.
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        let mut states = lock(&self.states);
        match new {
            Some(s) => states.insert(key.to_string(), s),
            None => states.remove(key),
        };
        Ok(())
    }
}

impl Coordinated for ShareCoordinator {
    fn store(&self) -> &Arc<dyn GroupStore> {
        &self.store
    }

    fn load(&self, mine: &dyn Fn(&str) -> bool) -> Result<usize> {
        let mut loaded = 0;
        let stored = self.store.load_groups(GroupCf::ShareState)?;
        let mut states = lock(&self.states);
        for (k, v) in stored {
            let Ok(key) = String::from_utf8(k) else {
                continue;
            };
            if !mine(&key) {
                continue;
            }
            match decode(&v) {
                Some(s) => {
                    states.insert(key, s);
                    loaded += 1;
                }
                None => tracing::warn!(key, "malformed share state; left out"),
            }
        }
        Ok(loaded)
    }

    fn unload(&self, gone: &dyn Fn(&str) -> bool) {
        lock(&self.states).retain(|k, _| !gone(k));
    }

    fn column_families(&self) -> &'static [GroupCf] {
        &[GroupCf::ShareState]
    }

    fn id_of(&self, _cf: GroupCf, key: &[u8]) -> Option<String> {
        String::from_utf8(key.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStore;

    fn write(leader_epoch: i32, start: i64, runs: &[Run]) -> StateWrite {
        StateWrite {
            state_epoch: 0,
            leader_epoch,
            start,
            runs: runs.to_vec(),
        }
    }

    #[test]
    fn keys_name_group_topic_and_partition() {
        let id = Uuid::from_u128(7);
        let k = key("a:b", id, 3);
        assert_eq!(parse_key(&k), Some(("a:b", id, 3)));
        assert_eq!(parse_key("nogroup"), None);
        assert_eq!(parse_key("g:not-a-uuid:1"), None);
    }

    #[test]
    fn writes_merge_newer_runs_over_older_and_cut_at_the_start() {
        let s = apply_write(None, &write(0, 10, &[(10, 19, 0, 1)])).unwrap();
        assert_eq!(s.runs, vec![(10, 19, 0, 1)]);
        // 12..14 acknowledged: the run splits around it.
        let s = apply_write(Some(&s), &write(0, -1, &[(12, 14, 2, 1)])).unwrap();
        assert_eq!(s.start, 10);
        assert_eq!(s.runs, vec![(10, 11, 0, 1), (12, 14, 2, 1), (15, 19, 0, 1)]);
        // The start moves past 11: the state below it goes; a run straddling it is cut.
        let s = apply_write(Some(&s), &write(0, 13, &[(19, 21, 4, 2)])).unwrap();
        assert_eq!(s.runs, vec![(13, 14, 2, 1), (15, 18, 0, 1), (19, 21, 4, 2)]);
        // A whole snapshot replaces what it covers.
        let s = apply_write(Some(&s), &write(0, 15, &[(15, 21, 2, 2)])).unwrap();
        assert_eq!(s.runs, vec![(15, 21, 2, 2)]);
    }

    #[test]
    fn older_epochs_are_fenced() {
        let s = apply_write(None, &write(5, 0, &[])).unwrap();
        assert_eq!(
            apply_write(Some(&s), &write(4, 0, &[])),
            Err(ResponseError::FencedLeaderEpoch)
        );
        assert!(apply_write(Some(&s), &write(5, 1, &[])).is_ok());
        let newer = apply_initialize(Some(&s), 2, 100).unwrap();
        assert_eq!((newer.start, newer.leader_epoch), (100, -1));
        assert_eq!(
            apply_initialize(Some(&newer), 1, 0),
            Err(ResponseError::FencedStateEpoch)
        );
        assert_eq!(
            apply_write(Some(&newer), &write(9, 0, &[])),
            Err(ResponseError::FencedStateEpoch)
        );
        assert_eq!(
            apply_write(None, &write(0, 0, &[(5, 4, 0, 1)])),
            Err(ResponseError::InvalidRequest)
        );
        // A new leader's read takes the epoch: the old leader's next write is fenced.
        let s = apply_write(None, &write(5, 0, &[])).unwrap();
        let read = apply_leader_read(&s, 6).unwrap();
        assert_eq!(read.leader_epoch, 6);
        assert_eq!(
            apply_write(Some(&read), &write(5, 1, &[])),
            Err(ResponseError::FencedLeaderEpoch)
        );
        assert_eq!(
            apply_leader_read(&read, 5),
            Err(ResponseError::FencedLeaderEpoch)
        );
    }

    #[test]
    fn states_survive_their_encoding() {
        let s = ShareState {
            state_epoch: 3,
            leader_epoch: 7,
            start: 1 << 40,
            runs: vec![
                (1 << 40, (1 << 40) + 5, 2, 1),
                ((1 << 40) + 9, (1 << 40) + 9, 4, 5),
            ],
        };
        assert_eq!(decode(&encode(&s)), Some(s.clone()));
        let bytes = encode(&s);
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode(&[]), None);
    }

    #[tokio::test]
    async fn the_coordinator_keeps_what_it_wrote_and_loads_it_again() {
        let store: Arc<dyn GroupStore> = Arc::new(MemoryStore::default());
        let c = ShareCoordinator::new(store.clone());
        let k = key("g", Uuid::from_u128(1), 0);
        assert_eq!(c.read(&k), Ok(None));
        c.initialize(&k, 0, 5).await.unwrap();
        c.write(&k, write(1, -1, &[(5, 6, 2, 1)])).await.unwrap();
        let other = key("h", Uuid::from_u128(1), 0);
        c.write(&other, write(0, 0, &[])).await.unwrap();
        c.delete(&other).await.unwrap();
        let again = ShareCoordinator::new(store);
        assert_eq!(again.load(&|_| true).unwrap(), 1);
        let s = again.read(&k).unwrap().unwrap();
        assert_eq!(
            (s.start, s.leader_epoch, s.runs.clone()),
            (5, 1, vec![(5, 6, 2, 1)])
        );
        assert_eq!(again.read(&other), Ok(None));
        assert_eq!(
            again
                .read_as_leader(&k, 3)
                .await
                .unwrap()
                .unwrap()
                .leader_epoch,
            3
        );
        assert_eq!(
            again.write(&k, write(2, -1, &[])).await,
            Err(ResponseError::FencedLeaderEpoch)
        );
        assert_eq!(again.read_as_leader(&other, 3).await, Ok(None));
    }
}
