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
//! The state is in memory only: a restarted broker starts every share partition afresh
//! from `share.auto.offset.reset`. (Persisting it in `__share_group_state`, as Kafka does,
//! is the next step.)

pub mod partition;

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use uuid::Uuid;

use partition::{AckError, Acquired, Limits, SharePartition};

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

#[derive(Default)]
struct Inner {
    partitions: HashMap<(String, Uuid, i32), SharePartition>,
    sessions: HashMap<(String, String), Session>,
}

pub struct Shares {
    inner: Mutex<Inner>,
    limits: Limits,
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
    /// Share partitions run under `limits` (the broker's `group.share.*` keys).
    pub fn new(limits: Limits) -> Shares {
        Shares {
            inner: Mutex::new(Inner::default()),
            limits,
            released: Notify::new(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
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
    pub fn close_session(&self, group: &str, member: &str) {
        tracing::debug!(group, member, "share session closed");
        let mut inner = self.lock();
        inner
            .sessions
            .remove(&(group.to_string(), member.to_string()));
        if release_member(&mut inner, group, member) {
            self.released.notify_waiters();
        }
    }

    /// A connection closed: the sessions opened on it end.
    pub fn connection_closed(&self, conn: &ConnKey) {
        let mut inner = self.lock();
        let gone: Vec<(String, String)> = inner
            .sessions
            .iter()
            .filter(|(_, s)| &s.conn == conn)
            .map(|(k, _)| k.clone())
            .collect();
        let mut any = false;
        for (group, member) in gone {
            tracing::debug!(group, member, "share session's connection closed");
            inner.sessions.remove(&(group.clone(), member.clone()));
            any |= release_member(&mut inner, &group, &member);
        }
        if any {
            self.released.notify_waiters();
        }
    }

    /// The share partition of `group` on `tp`, made when first needed with its start at
    /// `start()` (the offset `share.auto.offset.reset` picks).
    fn partition<'a>(
        inner: &'a mut Inner,
        limits: Limits,
        group: &str,
        tp: TopicIdPartition,
        start: impl FnOnce() -> i64,
    ) -> &'a mut SharePartition {
        inner
            .partitions
            .entry((group.to_string(), tp.0, tp.1))
            .or_insert_with(|| SharePartition::new(start(), limits))
    }

    /// Makes the share partition of `group` on `tp` if it has none, starting at `start`:
    /// Kafka initializes a share partition when the group is first assigned it.
    pub fn initialize(&self, group: &str, tp: TopicIdPartition, start: i64) {
        let mut inner = self.lock();
        Self::partition(&mut inner, self.limits, group, tp, || start);
    }

    /// Where a read for `group` on `tp` should begin, and whether there is anything to
    /// acquire in a log from `log_start` to `log_end`; locks that expired by `now_ms` are
    /// released first.
    pub fn next_read(
        &self,
        group: &str,
        tp: TopicIdPartition,
        log_start: i64,
        log_end: i64,
        now_ms: i64,
        start: impl FnOnce() -> i64,
    ) -> Option<i64> {
        let mut inner = self.lock();
        let p = Self::partition(&mut inner, self.limits, group, tp, start);
        p.log_start_moved(log_start);
        let expired = p.expire(now_ms);
        let next = p.can_acquire(log_end).then(|| p.next_read());
        drop(inner);
        if expired {
            self.released.notify_waiters();
        }
        next
    }

    /// Acquires for `member` what it may have of the batches read (see
    /// [`SharePartition::acquire`]).
    pub fn acquire(
        &self,
        group: &str,
        member: &str,
        tp: TopicIdPartition,
        batches: &[(i64, i64)],
        max_records: usize,
        now_ms: i64,
    ) -> Vec<Acquired> {
        let mut inner = self.lock();
        let got = match inner.partitions.get_mut(&(group.to_string(), tp.0, tp.1)) {
            Some(p) => p.acquire(member, batches, max_records, now_ms),
            None => Vec::new(),
        };
        tracing::debug!(group, member, ?got, "share records acquired");
        got
    }

    /// Applies a member's acknowledgement batches on one partition: all of them, or none
    /// when one is refused.
    pub fn acknowledge(
        &self,
        group: &str,
        member: &str,
        tp: TopicIdPartition,
        batches: &[(i64, i64, Vec<i8>)],
        now_ms: i64,
    ) -> Result<(), AckError> {
        let mut inner = self.lock();
        let Some(p) = inner.partitions.get_mut(&(group.to_string(), tp.0, tp.1)) else {
            return Err(AckError::NotAcquired(batches.first().map_or(0, |b| b.0)));
        };
        // Check every batch on a copy first: a refused batch leaves all of them unapplied.
        let mut trial = p.clone();
        tracing::debug!(group, member, ?batches, "share acknowledgements");
        for (first, last, types) in batches {
            trial.acknowledge(member, *first, *last, types, false, now_ms)?;
        }
        *p = trial;
        drop(inner);
        // Released records can be fetched again at once.
        self.released.notify_waiters();
        Ok(())
    }

    /// The start offset of every share partition of `group` (DescribeShareGroupOffsets).
    pub fn start_offsets(&self, group: &str) -> Vec<(TopicIdPartition, i64)> {
        let inner = self.lock();
        let mut out: Vec<_> = inner
            .partitions
            .iter()
            .filter(|((g, _, _), _)| g == group)
            .map(|((_, t, p), sp)| ((*t, *p), sp.start()))
            .collect();
        out.sort();
        out
    }

    /// Forgets every share partition and session of `group` (DeleteGroups).
    pub fn forget_group(&self, group: &str) {
        let mut inner = self.lock();
        inner.partitions.retain(|(g, _, _), _| g != group);
        inner.sessions.retain(|(g, _), _| g != group);
    }

    /// Records in flight and acquired now, over every share partition (metrics).
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        inner
            .partitions
            .values()
            .fold((0, 0), |(f, a), p| (f + p.in_flight(), a + p.acquired()))
    }
}

fn not_found(member: &str) -> (ResponseError, String) {
    (
        ResponseError::ShareSessionNotFound,
        format!("The share session for member {member} was not found."),
    )
}

/// Gives back the records `member` of `group` holds.
fn release_member(inner: &mut Inner, group: &str, member: &str) -> bool {
    let mut any = false;
    for ((g, _, _), sp) in inner.partitions.iter_mut() {
        if g == group {
            any |= sp.release_member(member);
        }
    }
    any
}
