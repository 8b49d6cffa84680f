//! One group of Kafka's classic group protocol as a pure state machine.
//!
//! Requests and the clock come in as method calls with `now`; answers come out either at
//! once ([`Outcome::Now`]) or later, as [`Reply`]s that a later event (the last member
//! joining, the leader's SyncGroup, a deadline) puts in the outbox. Changes to persist come
//! out as [`Persist`] records. Nothing here does I/O or reads a clock, so every timeout is
//! tested by passing instants (see the tests, which run on tokio's paused clock).
//!
//! The states and transitions are Kafka's (`ClassicGroup` in Kafka's group-coordinator):
//!
//! ```text
//! Empty --join--> PreparingRebalance --all joined / deadline--> CompletingRebalance
//!   ^                  ^     |                                      | leader's SyncGroup
//!   +-- last member ---+     +--- nobody left --> Empty             v
//!       leaves/expires  <------ join, leave, expiry ------------- Stable
//! ```
//!
//! `Dead` is a group that was deleted; the coordinator drops it.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::ResponseError;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka's DescribeGroups and ListGroups use.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// Broker settings the groups obey (Kafka's `group.*` keys).
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    pub initial_rebalance_delay: Duration,
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    /// (protocol name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    awaiting_join: bool,
    awaiting_sync: bool,
    /// The session expires when no heartbeat (or join/sync) arrives before this.
    deadline: Instant,
}

impl Member {
    /// The metadata this member sent for `protocol`.
    pub fn metadata(&self, protocol: Option<&str>) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| Some(n.as_str()) == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// A JoinGroup request, decoded.
#[derive(Debug, Clone)]
pub struct Join {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: an unknown member first gets MEMBER_ID_REQUIRED and an id.
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JoinResult {
    pub error: Option<ResponseError>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only: (member id, group instance id, metadata).
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinResult {
    pub fn error(error: ResponseError, member_id: &str) -> JoinResult {
        JoinResult {
            error: Some(error),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SyncResult {
    pub error: Option<ResponseError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(error: ResponseError) -> SyncResult {
        SyncResult {
            error: Some(error),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// An answer now, or later through the outbox to the waiter registered for this member.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T> {
    Now(T),
    Wait(String),
}

/// A delayed answer to a member's JoinGroup or SyncGroup.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Join(String, JoinResult),
    Sync(String, SyncResult),
}

/// A change for the coordinator to write. (The group's committed offsets are kept, and
/// written, apart: see [`super::offsets`].)
#[derive(Debug, Clone, PartialEq)]
pub enum Persist {
    /// The group's membership record; `None` deletes it.
    Group(Option<GroupRecord>),
}

/// What survives a restart of the group itself (Kafka's GroupMetadataValue).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub generation: i32,
    pub leader: Option<String>,
    pub members: Vec<MemberRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub assignment: Vec<u8>,
}

pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    /// In join order: the first member left is the next leader.
    pub members: IndexMap<String, Member>,
    /// Group instance id -> member id, for static members.
    statics: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until they join or expire.
    pending: HashMap<String, Instant>,
    /// PreparingRebalance ends by this instant even if some members never rejoin.
    rebalance_deadline: Option<Instant>,
    /// Kafka's initial rebalance delay for a group that was empty: (until, cap).
    initial_delay: Option<(Instant, Instant)>,
    /// When the group last became empty (offsets of empty groups expire from here).
    pub empty_since: Option<Instant>,
    limits: GroupLimits,
    outbox: Vec<Reply>,
    persist: Vec<Persist>,
}

impl Group {
    pub fn new(id: &str, limits: GroupLimits, now: Instant) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: IndexMap::new(),
            statics: HashMap::new(),
            pending: HashMap::new(),
            rebalance_deadline: None,
            initial_delay: None,
            empty_since: Some(now),
            limits,
            outbox: Vec::new(),
            persist: Vec::new(),
        }
    }

    /// Rebuilds a group from its stored record. Members come back as a Stable group and must
    /// heartbeat within their session timeout, as after a coordinator move in Kafka.
    pub fn restore(id: &str, r: GroupRecord, limits: GroupLimits, now: Instant) -> Group {
        let mut g = Group::new(id, limits, now);
        g.generation = r.generation;
        g.protocol_type = r.protocol_type;
        g.protocol_name = r.protocol;
        g.leader = r.leader;
        for m in r.members {
            let session_timeout = Duration::from_millis(m.session_timeout_ms);
            if let Some(i) = &m.instance_id {
                g.statics.insert(i.clone(), m.id.clone());
            }
            g.members.insert(
                m.id.clone(),
                Member {
                    id: m.id,
                    instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout,
                    rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms),
                    protocol_type: m.protocol_type,
                    protocols: m
                        .protocols
                        .into_iter()
                        .map(|(n, b)| (n, Bytes::from(b)))
                        .collect(),
                    assignment: Bytes::from(m.assignment),
                    awaiting_join: false,
                    awaiting_sync: false,
                    deadline: now + session_timeout,
                },
            );
        }
        if !g.members.is_empty() {
            g.state = GroupState::Stable;
            g.empty_since = None;
        }
        g
    }

    pub fn record(&self) -> GroupRecord {
        GroupRecord {
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol_name.clone(),
            generation: self.generation,
            leader: self.leader.clone(),
            members: self
                .members
                .values()
                .map(|m| MemberRecord {
                    id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout.as_millis() as u64,
                    rebalance_timeout_ms: m.rebalance_timeout.as_millis() as u64,
                    protocol_type: m.protocol_type.clone(),
                    protocols: m
                        .protocols
                        .iter()
                        .map(|(n, b)| (n.clone(), b.to_vec()))
                        .collect(),
                    assignment: m.assignment.to_vec(),
                })
                .collect(),
        }
    }

    /// Delayed answers produced by the last events.
    pub fn take_replies(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.outbox)
    }

    /// Changes to write produced by the last events.
    pub fn take_persist(&mut self) -> Vec<Persist> {
        std::mem::take(&mut self.persist)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    // ---- JoinGroup ----

    pub fn join(&mut self, now: Instant, j: Join) -> Outcome<JoinResult> {
        if j.session_timeout < self.limits.min_session_timeout
            || j.session_timeout > self.limits.max_session_timeout
        {
            return Outcome::Now(JoinResult::error(
                ResponseError::InvalidSessionTimeout,
                &j.member_id,
            ));
        }
        if !self.supports(&j) {
            return Outcome::Now(JoinResult::error(
                ResponseError::InconsistentGroupProtocol,
                &j.member_id,
            ));
        }
        if self.state == GroupState::Dead {
            return Outcome::Now(JoinResult::error(
                ResponseError::CoordinatorNotAvailable,
                &j.member_id,
            ));
        }
        if j.member_id.is_empty() {
            self.join_new(now, j)
        } else {
            self.join_known(now, j)
        }
    }

    /// Kafka's `supportsProtocols`: a group with members accepts only its protocol type and
    /// a protocol every member supports.
    fn supports(&self, j: &Join) -> bool {
        if j.protocol_type.is_empty() || j.protocols.is_empty() {
            return false;
        }
        let others: Vec<&Member> = self
            .members
            .values()
            .filter(|m| m.id != j.member_id)
            .collect();
        if others.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(j.protocol_type.as_str())
            && j.protocols.iter().any(|(name, _)| {
                others
                    .iter()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    fn join_new(&mut self, now: Instant, j: Join) -> Outcome<JoinResult> {
        let new_id = format!("{}-{}", j.client_id, uuid::Uuid::new_v4());
        if let Some(instance) = j.instance_id.clone() {
            if let Some(old_id) = self.statics.get(&instance).cloned() {
                // A static member restarting: it takes over its old slot under a new id;
                // the old id is fenced.
                let unchanged = self
                    .members
                    .get(&old_id)
                    .is_some_and(|m| m.protocols == j.protocols);
                self.replace_static(&old_id, &new_id);
                self.update_member(now, &new_id, &j);
                if self.state == GroupState::Stable && unchanged {
                    // As in Kafka: same protocols, so it keeps its assignment and nobody
                    // else rebalances.
                    self.persist.push(Persist::Group(Some(self.record())));
                    return Outcome::Now(self.join_result(&new_id));
                }
                return self.rejoin(now, &new_id, true);
            }
            return self.add_member(now, new_id, j);
        }
        if j.require_known_member_id {
            self.pending.insert(new_id.clone(), now + j.session_timeout);
            return Outcome::Now(JoinResult::error(ResponseError::MemberIdRequired, &new_id));
        }
        self.add_member(now, new_id, j)
    }

    fn join_known(&mut self, now: Instant, j: Join) -> Outcome<JoinResult> {
        let id = j.member_id.clone();
        if self.pending.remove(&id).is_some() {
            return self.add_member(now, id, j);
        }
        if let Err(e) = self.check_member(&id, j.instance_id.as_deref()) {
            return Outcome::Now(JoinResult::error(e, &id));
        }
        let changed = self.members[&id].protocols != j.protocols;
        self.update_member(now, &id, &j);
        match self.state {
            GroupState::PreparingRebalance => self.rejoin(now, &id, false),
            GroupState::CompletingRebalance if !changed => {
                // The member lost our answer: send the same one again.
                Outcome::Now(self.join_result(&id))
            }
            GroupState::Stable if !changed && self.leader.as_deref() != Some(id.as_str()) => {
                Outcome::Now(self.join_result(&id))
            }
            GroupState::CompletingRebalance | GroupState::Stable => self.rejoin(now, &id, true),
            GroupState::Empty | GroupState::Dead => {
                Outcome::Now(JoinResult::error(ResponseError::UnknownMemberId, &id))
            }
        }
    }

    fn add_member(&mut self, now: Instant, id: String, j: Join) -> Outcome<JoinResult> {
        if self.members.is_empty() {
            // The first member sets the protocol type (an empty group keeps the old one,
            // as Kafka's does, so it is still listed as a consumer group).
            self.protocol_type = Some(j.protocol_type.clone());
        }
        if let Some(i) = &j.instance_id {
            self.statics.insert(i.clone(), id.clone());
        }
        self.members.insert(
            id.clone(),
            Member {
                id: id.clone(),
                instance_id: j.instance_id.clone(),
                client_id: j.client_id.clone(),
                client_host: j.client_host.clone(),
                session_timeout: j.session_timeout,
                rebalance_timeout: j.rebalance_timeout,
                protocol_type: j.protocol_type.clone(),
                protocols: j.protocols.clone(),
                assignment: Bytes::new(),
                awaiting_join: false,
                awaiting_sync: false,
                deadline: now + j.session_timeout,
            },
        );
        if self.leader.is_none() {
            self.leader = Some(id.clone());
        }
        self.empty_since = None;
        if let Some((until, cap)) = &mut self.initial_delay {
            // Kafka's InitialDelayedJoin: each newcomer extends the delay, up to the cap.
            *until = (now + self.limits.initial_rebalance_delay).min(*cap);
        }
        self.rejoin(now, &id, true)
    }

    fn update_member(&mut self, now: Instant, id: &str, j: &Join) {
        let m = self.members.get_mut(id).expect("member checked");
        m.protocols = j.protocols.clone();
        m.session_timeout = j.session_timeout;
        m.rebalance_timeout = j.rebalance_timeout;
        m.client_id = j.client_id.clone();
        m.client_host = j.client_host.clone();
        m.deadline = now + j.session_timeout;
    }

    /// Marks the member as waiting for the join to complete, rebalancing if `rebalance`.
    fn rejoin(&mut self, now: Instant, id: &str, rebalance: bool) -> Outcome<JoinResult> {
        if rebalance && self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now);
        }
        if let Some(m) = self.members.get_mut(id) {
            m.awaiting_join = true;
        }
        self.try_complete_join(now, false);
        Outcome::Wait(id.to_string())
    }

    fn replace_static(&mut self, old_id: &str, new_id: &str) {
        let Some(mut m) = self.members.shift_remove(old_id) else {
            return;
        };
        self.answer_parked(&mut m, ResponseError::FencedInstanceId);
        m.id = new_id.to_string();
        if let Some(i) = &m.instance_id {
            self.statics.insert(i.clone(), new_id.to_string());
        }
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.to_string());
        }
        self.members.insert(new_id.to_string(), m);
    }

    fn prepare_rebalance(&mut self, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            self.fail_pending_syncs(ResponseError::RebalanceInProgress);
        }
        if self.state == GroupState::Empty && !self.limits.initial_rebalance_delay.is_zero() {
            let cap = now + self.max_rebalance_timeout();
            self.initial_delay = Some(((now + self.limits.initial_rebalance_delay).min(cap), cap));
        }
        self.state = GroupState::PreparingRebalance;
        self.rebalance_deadline = Some(now + self.max_rebalance_timeout());
    }

    fn max_rebalance_timeout(&self) -> Duration {
        self.members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn fail_pending_syncs(&mut self, error: ResponseError) {
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
            if std::mem::take(&mut m.awaiting_sync) {
                self.outbox
                    .push(Reply::Sync(m.id.clone(), SyncResult::error(error)));
            }
        }
    }

    /// Completes the join phase when every member has rejoined (and no new member is still
    /// fetching its id), or unconditionally when `deadline_passed`.
    fn try_complete_join(&mut self, now: Instant, deadline_passed: bool) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        if self.initial_delay.is_some_and(|(until, _)| now < until) {
            return;
        }
        self.initial_delay = None;
        let all_joined = self.pending.is_empty() && self.members.values().all(|m| m.awaiting_join);
        if !all_joined && !deadline_passed {
            return;
        }
        // Dynamic members that did not rejoin in time are out; static ones keep their slot.
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in gone {
            self.drop_member(&id);
        }
        self.rebalance_deadline = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.become_empty(now);
            return;
        }
        self.protocol_name = self.select_protocol();
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = GroupState::CompletingRebalance;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result(&id);
            let m = self.members.get_mut(&id).expect("listed");
            m.deadline = now + m.session_timeout;
            if std::mem::take(&mut m.awaiting_join) {
                self.outbox.push(Reply::Join(id, result));
            }
        }
    }

    fn become_empty(&mut self, now: Instant) {
        self.state = GroupState::Empty;
        self.protocol_name = None;
        self.leader = None;
        self.empty_since = Some(now);
        self.persist.push(Persist::Group(Some(self.record())));
    }

    /// Kafka's `selectProtocol`: each member votes for its most preferred protocol among
    /// those all members support; the most votes wins (ties: the leader's preference order).
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == *n))
            })
            .collect();
        let mut votes: Vec<(usize, &String)> = candidates.iter().map(|c| (0, *c)).collect();
        for m in self.members.values() {
            if let Some((_, choice)) = m.protocols.iter().find(|(p, _)| candidates.contains(&p)) {
                if let Some(v) = votes.iter_mut().find(|(_, c)| *c == choice) {
                    v.0 += 1;
                }
            }
        }
        let best = votes.iter().map(|(n, _)| *n).max()?;
        votes
            .into_iter()
            .find(|(n, _)| *n == best)
            .map(|(_, c)| c.clone())
    }

    fn join_result(&self, id: &str) -> JoinResult {
        let is_leader = self.leader.as_deref() == Some(id);
        JoinResult {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: id.to_string(),
            members: if is_leader {
                self.members
                    .values()
                    .map(|m| {
                        (
                            m.id.clone(),
                            m.instance_id.clone(),
                            m.metadata(self.protocol_name.as_deref()),
                        )
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    // ---- SyncGroup, Heartbeat, LeaveGroup ----

    /// Kafka's member validation: the member exists, and a static member's instance id
    /// still belongs to this member id.
    fn check_member(&self, id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
        if let Some(instance) = instance_id {
            match self.statics.get(instance) {
                Some(owner) if owner != id => return Err(ResponseError::FencedInstanceId),
                None if self.members.contains_key(id) => {
                    return Err(ResponseError::FencedInstanceId)
                }
                _ => {}
            }
        }
        if self.members.contains_key(id) {
            Ok(())
        } else {
            Err(ResponseError::UnknownMemberId)
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        now: Instant,
        id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> Outcome<SyncResult> {
        if matches!(self.state, GroupState::Empty | GroupState::Dead) {
            return Outcome::Now(SyncResult::error(ResponseError::UnknownMemberId));
        }
        if let Err(e) = self.check_member(id, instance_id) {
            return Outcome::Now(SyncResult::error(e));
        }
        if generation != self.generation {
            return Outcome::Now(SyncResult::error(ResponseError::IllegalGeneration));
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol_name.is_some_and(|n| Some(n) != self.protocol_name.as_deref())
        {
            return Outcome::Now(SyncResult::error(ResponseError::InconsistentGroupProtocol));
        }
        let m = self.members.get_mut(id).expect("checked");
        m.deadline = now + m.session_timeout;
        match self.state {
            GroupState::PreparingRebalance => {
                Outcome::Now(SyncResult::error(ResponseError::RebalanceInProgress))
            }
            GroupState::CompletingRebalance => {
                m.awaiting_sync = true;
                if self.leader.as_deref() == Some(id) {
                    let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = given.remove(&m.id).unwrap_or_default();
                    }
                    self.state = GroupState::Stable;
                    self.persist.push(Persist::Group(Some(self.record())));
                    let result = |m: &Member| SyncResult {
                        error: None,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        assignment: m.assignment.clone(),
                    };
                    let replies: Vec<Reply> = self
                        .members
                        .values()
                        .filter(|m| m.awaiting_sync)
                        .map(|m| Reply::Sync(m.id.clone(), result(m)))
                        .collect();
                    self.outbox.extend(replies);
                    for m in self.members.values_mut() {
                        m.awaiting_sync = false;
                    }
                }
                Outcome::Wait(id.to_string())
            }
            GroupState::Stable => Outcome::Now(SyncResult {
                error: None,
                protocol_type: self.protocol_type.clone(),
                protocol_name: self.protocol_name.clone(),
                assignment: m.assignment.clone(),
            }),
            GroupState::Empty | GroupState::Dead => unreachable!("checked above"),
        }
    }

    pub fn heartbeat(
        &mut self,
        now: Instant,
        id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        if matches!(self.state, GroupState::Empty | GroupState::Dead) {
            return Err(ResponseError::UnknownMemberId);
        }
        self.check_member(id, instance_id)?;
        if generation != self.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        let m = self.members.get_mut(id).expect("checked");
        m.deadline = now + m.session_timeout;
        match self.state {
            GroupState::PreparingRebalance => Err(ResponseError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// LeaveGroup for one member, by member id or (static members) by instance id.
    pub fn leave(
        &mut self,
        now: Instant,
        id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        let id = match instance_id {
            Some(instance) => match self.statics.get(instance) {
                Some(owner) if id.is_empty() || owner == id => owner.clone(),
                Some(_) => return Err(ResponseError::FencedInstanceId),
                None => return Err(ResponseError::UnknownMemberId),
            },
            None => id.to_string(),
        };
        if self.pending.remove(&id).is_some() {
            return Ok(());
        }
        if !self.members.contains_key(&id) {
            return Err(ResponseError::UnknownMemberId);
        }
        self.remove_member(now, &id);
        Ok(())
    }

    /// Removes a member (left or expired) and rebalances the rest.
    fn remove_member(&mut self, now: Instant, id: &str) {
        self.drop_member(id);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now);
                self.try_complete_join(now, false);
            }
            GroupState::PreparingRebalance => self.try_complete_join(now, false),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Answers a member's parked JoinGroup/SyncGroup with `error` (it is leaving the group).
    fn answer_parked(&mut self, m: &mut Member, error: ResponseError) {
        if std::mem::take(&mut m.awaiting_join) {
            self.outbox
                .push(Reply::Join(m.id.clone(), JoinResult::error(error, &m.id)));
        }
        if std::mem::take(&mut m.awaiting_sync) {
            self.outbox
                .push(Reply::Sync(m.id.clone(), SyncResult::error(error)));
        }
    }

    fn drop_member(&mut self, id: &str) {
        let Some(mut m) = self.members.shift_remove(id) else {
            return;
        };
        if let Some(i) = &m.instance_id {
            self.statics.remove(i);
        }
        self.answer_parked(&mut m, ResponseError::UnknownMemberId);
        if self.leader.as_deref() == Some(id) {
            self.leader = self.members.keys().next().cloned();
        }
    }

    // ---- time ----

    /// Expires sessions and pending member ids, and ends rebalances whose time is up.
    pub fn tick(&mut self, now: Instant) {
        self.pending.retain(|_, deadline| *deadline > now);
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join && m.deadline <= now)
            .map(|m| m.id.clone())
            .collect();
        for id in expired {
            tracing::info!(group = %self.id, member = %id, "session expired");
            self.remove_member(now, &id);
        }
        if self.state == GroupState::PreparingRebalance {
            let passed = self.rebalance_deadline.is_some_and(|d| d <= now);
            self.try_complete_join(now, passed);
        }
    }

    /// The next instant at which [`Group::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let sessions = self
            .members
            .values()
            .filter(|m| !m.awaiting_join)
            .map(|m| m.deadline);
        sessions
            .chain(self.pending.values().copied())
            .chain(self.rebalance_deadline)
            .chain(self.initial_delay.map(|(until, _)| until))
            .min()
    }

    // ---- offsets: who may commit (the offsets themselves live in `super::offsets`) ----

    /// Kafka's `validateOffsetCommit` for classic groups.
    pub fn check_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        if self.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if generation < 0 && self.state == GroupState::Empty {
            // An assign()-only consumer or the admin client.
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.check_member(member_id, instance_id)?;
            if generation != self.generation {
                return Err(ResponseError::IllegalGeneration);
            }
        } else if self.state != GroupState::Empty {
            return Err(ResponseError::UnknownMemberId);
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// Topics the members subscribe to, if the group speaks the consumer protocol.
    pub fn subscribed_topics(&self) -> Vec<String> {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        use kafka_protocol::protocol::Decodable;
        if self.protocol_type.as_deref() != Some("consumer") {
            return Vec::new();
        }
        let mut topics = Vec::new();
        for m in self.members.values() {
            let mut meta = m.metadata(self.protocol_name.as_deref());
            if meta.len() < 2 {
                continue;
            }
            let version = i16::from_be_bytes([meta[0], meta[1]]);
            let mut body = meta.split_off(2);
            if let Ok(s) = ConsumerProtocolSubscription::decode(&mut body, version.clamp(0, 3)) {
                topics.extend(s.topics.iter().map(|t| t.to_string()));
            }
        }
        topics.sort();
        topics.dedup();
        topics
    }

    /// Marks the group deleted (DeleteGroups on an empty group); the coordinator deletes
    /// its offsets with it.
    pub fn delete(&mut self) {
        self.state = GroupState::Dead;
        self.persist.push(Persist::Group(None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(delay_ms: u64) -> GroupLimits {
        GroupLimits {
            initial_rebalance_delay: Duration::from_millis(delay_ms),
            min_session_timeout: Duration::from_millis(6000),
            max_session_timeout: Duration::from_millis(1_800_000),
        }
    }

    fn join(member: &str, protocols: &[&str]) -> Join {
        Join {
            member_id: member.to_string(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}"))))
                .collect(),
            require_known_member_id: true,
        }
    }

    /// Joins a new member the v4+ way (MEMBER_ID_REQUIRED, then again with the id).
    fn join_new(g: &mut Group, now: Instant, protocols: &[&str]) -> String {
        let Outcome::Now(r) = g.join(now, join("", protocols)) else {
            panic!("first join answers at once")
        };
        assert_eq!(r.error, Some(ResponseError::MemberIdRequired));
        assert!(r.member_id.starts_with("c-"));
        assert_eq!(
            g.join(now, join(&r.member_id, protocols)),
            Outcome::Wait(r.member_id.clone())
        );
        r.member_id
    }

    fn joined(replies: &[Reply]) -> Vec<(&str, &JoinResult)> {
        replies
            .iter()
            .filter_map(|r| match r {
                Reply::Join(id, j) => Some((id.as_str(), j)),
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn one_member_joins_syncs_and_heartbeats() {
        let now = Instant::now();
        let mut g = Group::new("g", limits(0), now);
        let a = join_new(&mut g, now, &["range"]);
        let replies = g.take_replies();
        let j = joined(&replies);
        assert_eq!(j.len(), 1);
        let r = j[0].1;
        assert_eq!((r.generation, r.leader.as_str()), (1, a.as_str()));
        assert_eq!(r.protocol_name.as_deref(), Some("range"));
        assert_eq!(r.members.len(), 1, "the leader sees every member");
        assert_eq!(g.state, GroupState::CompletingRebalance);
        assert_eq!(
            g.heartbeat(now, &a, None, 1),
            Ok(()),
            "heartbeats are fine while the leader assigns"
        );
        let out = g.sync(
            now,
            &a,
            None,
            1,
            None,
            None,
            vec![(a.clone(), Bytes::from("A"))],
        );
        assert_eq!(out, Outcome::Wait(a.clone()));
        let replies = g.take_replies();
        assert!(matches!(&replies[..], [Reply::Sync(id, s)] if id == &a && s.assignment == "A"));
        assert_eq!(g.state, GroupState::Stable);
        assert!(matches!(g.take_persist()[..], [Persist::Group(Some(_))]));
        assert_eq!(
            g.heartbeat(now, &a, None, 0),
            Err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            g.heartbeat(now, "nobody", None, 1),
            Err(ResponseError::UnknownMemberId)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_member_triggers_a_rebalance_both_rejoin() {
        let now = Instant::now();
        let mut g = Group::new("g", limits(0), now);
        let a = join_new(&mut g, now, &["range"]);
        g.take_replies();
        g.sync(now, &a, None, 1, None, None, vec![]);
        g.take_replies();
        let b = join_new(&mut g, now, &["range"]);
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert_eq!(
            g.heartbeat(now, &a, None, 1),
            Err(ResponseError::RebalanceInProgress)
        );
        assert!(g.take_replies().is_empty(), "waits for a to rejoin");
        assert_eq!(g.join(now, join(&a, &["range"])), Outcome::Wait(a.clone()));
        let replies = g.take_replies();
        let j = joined(&replies);
        assert_eq!(j.len(), 2);
        for (_, r) in &j {
            assert_eq!(r.generation, 2);
            assert_eq!(r.leader, a, "the leader stays");
        }
        let leader_view = j.iter().find(|(id, _)| *id == a).unwrap().1;
        assert_eq!(leader_view.members.len(), 2);
        assert!(j
            .iter()
            .find(|(id, _)| *id == b)
            .unwrap()
            .1
            .members
            .is_empty());
        // b's sync waits for the leader's.
        assert_eq!(
            g.sync(now, &b, None, 2, None, None, vec![]),
            Outcome::Wait(b.clone())
        );
        assert!(g.take_replies().is_empty());
        g.sync(
            now,
            &a,
            None,
            2,
            Some("consumer"),
            Some("range"),
            vec![(a.clone(), Bytes::from("A")), (b.clone(), Bytes::from("B"))],
        );
        let replies = g.take_replies();
        assert_eq!(replies.len(), 2);
        assert!(replies.contains(&Reply::Sync(
            b.clone(),
            SyncResult {
                error: None,
                protocol_type: Some("consumer".into()),
                protocol_name: Some("range".into()),
                assignment: Bytes::from("B")
            }
        )));
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_expire_and_the_rebalance_deadline_drops_laggards() {
        let t0 = Instant::now();
        let mut g = Group::new("g", limits(0), t0);
        let a = join_new(&mut g, t0, &["range"]);
        g.take_replies();
        g.sync(t0, &a, None, 1, None, None, vec![]);
        let b = join_new(&mut g, t0, &["range"]);
        // a never rejoins: at the rebalance deadline (30 s) it is dropped and b carries on.
        assert_eq!(g.next_deadline(), Some(t0 + Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(10)).await;
        g.tick(Instant::now());
        assert!(!g.members.contains_key(&a), "a's session expired");
        let replies = g.take_replies();
        let j = joined(&replies);
        assert_eq!(j.len(), 1);
        assert_eq!((j[0].0, j[0].1.generation), (b.as_str(), 2));
        assert_eq!(g.leader.as_deref(), Some(b.as_str()));
        // b goes quiet too: the group ends up empty.
        tokio::time::advance(Duration::from_secs(11)).await;
        g.tick(Instant::now());
        assert_eq!(g.state, GroupState::Empty);
        assert!(g.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_rebalance_timeout_completes_the_join_without_the_silent_member() {
        let t0 = Instant::now();
        let mut g = Group::new("g", limits(0), t0);
        let a = join_new(&mut g, t0, &["range"]);
        g.take_replies();
        g.sync(t0, &a, None, 1, None, None, vec![]);
        let b = join_new(&mut g, t0, &["range"]);
        // a keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins.
        for _ in 0..4 {
            tokio::time::advance(Duration::from_secs(8)).await;
            let _ = g.heartbeat(Instant::now(), &a, None, 1);
            g.tick(Instant::now());
        }
        assert!(!g.members.contains_key(&a));
        let replies = g.take_replies();
        assert_eq!(joined(&replies)[0].0, b);
        assert_eq!(g.state, GroupState::CompletingRebalance);
    }

    #[tokio::test(start_paused = true)]
    async fn initial_delay_waits_for_more_members() {
        let t0 = Instant::now();
        let mut g = Group::new("g", limits(3000), t0);
        let _a = join_new(&mut g, t0, &["range"]);
        tokio::time::advance(Duration::from_secs(2)).await;
        let _b = join_new(&mut g, Instant::now(), &["range"]);
        g.tick(Instant::now());
        assert!(g.take_replies().is_empty(), "still inside the delay");
        tokio::time::advance(Duration::from_millis(3000)).await;
        g.tick(Instant::now());
        let replies = g.take_replies();
        assert_eq!(joined(&replies).len(), 2, "both in the first generation");
        assert_eq!(g.generation, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn protocol_checks_and_selection() {
        let now = Instant::now();
        let mut g = Group::new("g", limits(0), now);
        let mut bad = join("", &["range"]);
        bad.session_timeout = Duration::from_secs(1);
        assert!(matches!(
            g.join(now, bad),
            Outcome::Now(JoinResult {
                error: Some(ResponseError::InvalidSessionTimeout),
                ..
            })
        ));
        assert!(matches!(
            g.join(now, join("", &[])),
            Outcome::Now(JoinResult {
                error: Some(ResponseError::InconsistentGroupProtocol),
                ..
            })
        ));
        let a = join_new(&mut g, now, &["cooperative-sticky", "range"]);
        g.take_replies();
        let mut other = join("", &["roundrobin"]);
        other.require_known_member_id = false;
        assert!(matches!(
            g.join(now, other),
            Outcome::Now(JoinResult {
                error: Some(ResponseError::InconsistentGroupProtocol),
                ..
            })
        ));
        let mut connect = join("", &["range"]);
        connect.protocol_type = "connect".into();
        assert!(matches!(
            g.join(now, connect),
            Outcome::Now(JoinResult {
                error: Some(ResponseError::InconsistentGroupProtocol),
                ..
            })
        ));
        g.sync(now, &a, None, 1, None, None, vec![]);
        let _b = join_new(&mut g, now, &["range", "cooperative-sticky"]);
        g.join(now, join(&a, &["cooperative-sticky", "range"]));
        // one vote each; the tie goes to the first member's preference
        assert_eq!(g.protocol_name.as_deref(), Some("cooperative-sticky"));
        assert!(matches!(
            g.sync(now, &a, None, 2, Some("consumer"), Some("range"), vec![]),
            Outcome::Now(SyncResult {
                error: Some(ResponseError::InconsistentGroupProtocol),
                ..
            })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn leave_rebalances_and_the_last_leaver_empties_the_group() {
        let now = Instant::now();
        let mut g = Group::new("g", limits(0), now);
        let a = join_new(&mut g, now, &["range"]);
        let b = join_new(&mut g, now, &["range"]);
        g.join(now, join(&a, &["range"]));
        g.take_replies();
        assert_eq!(
            (g.state, g.generation),
            (GroupState::CompletingRebalance, 2)
        );
        assert_eq!(
            g.sync(now, &b, None, 2, None, None, vec![]),
            Outcome::Wait(b.clone())
        );
        assert_eq!(g.leave(now, &a, None), Ok(()));
        // b's pending sync is told to rejoin; b alone is the new generation
        let replies = g.take_replies();
        assert!(replies.contains(&Reply::Sync(
            b.clone(),
            SyncResult::error(ResponseError::RebalanceInProgress)
        )));
        assert_eq!(
            g.leave(now, "ghost", None),
            Err(ResponseError::UnknownMemberId)
        );
        g.join(now, join(&b, &["range"]));
        assert_eq!(g.generation, 3);
        assert_eq!(g.leader.as_deref(), Some(b.as_str()));
        assert_eq!(g.leave(now, &b, None), Ok(()));
        assert_eq!(g.state, GroupState::Empty);
        assert_eq!(g.generation, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn static_members_are_replaced_and_fenced() {
        let now = Instant::now();
        let mut g = Group::new("g", limits(0), now);
        let mut s = join("", &["range"]);
        s.instance_id = Some("i-1".into());
        let Outcome::Wait(first) = g.join(now, s.clone()) else {
            panic!("static members join without MEMBER_ID_REQUIRED")
        };
        g.take_replies();
        g.sync(now, &first, Some("i-1"), 1, None, None, vec![]);
        g.take_replies();
        // The same instance restarts: a new member id, the old one fenced, and (Stable, same
        // protocols) no rebalance: it gets the current generation at once.
        let Outcome::Now(r) = g.join(now, s.clone()) else {
            panic!("answers at once")
        };
        let second = r.member_id.clone();
        assert_ne!(first, second);
        assert_eq!((r.error, r.generation), (None, 1));
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(
            g.heartbeat(now, &first, Some("i-1"), 1),
            Err(ResponseError::FencedInstanceId)
        );
        assert_eq!(g.heartbeat(now, &second, Some("i-1"), 1), Ok(()));
        // With other protocols it rebalances.
        let mut changed = s;
        changed.protocols = vec![
            ("range".into(), Bytes::from_static(b"other")),
            ("roundrobin".into(), Bytes::from_static(b"m")),
        ];
        changed.member_id = String::new();
        let Outcome::Wait(third) = g.join(now, changed) else {
            panic!("waits for the rebalance")
        };
        assert_eq!(g.generation, 2);
        assert_eq!(
            g.heartbeat(now, &second, Some("i-1"), 2),
            Err(ResponseError::FencedInstanceId)
        );
        assert!(g.members.contains_key(&third));
        assert_eq!(g.leave(now, "", Some("i-1")), Ok(()));
        assert_eq!(g.state, GroupState::Empty);
    }

    #[tokio::test(start_paused = true)]
    async fn commit_checks_follow_kafka() {
        let now = Instant::now();
        let mut g = Group::new("g", limits(0), now);
        assert_eq!(
            g.check_commit("", None, -1),
            Ok(()),
            "simple consumers on an empty group"
        );
        let a = join_new(&mut g, now, &["range"]);
        g.take_replies();
        assert_eq!(
            g.check_commit(&a, None, 1),
            Err(ResponseError::RebalanceInProgress)
        );
        assert_eq!(
            g.check_commit("", None, -1),
            Err(ResponseError::UnknownMemberId)
        );
        g.sync(now, &a, None, 1, None, None, vec![]);
        assert_eq!(g.check_commit(&a, None, 1), Ok(()));
        assert_eq!(
            g.check_commit(&a, None, 7),
            Err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            g.check_commit("x", None, 1),
            Err(ResponseError::UnknownMemberId)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn restore_brings_members_back_stable() {
        let now = Instant::now();
        let mut g = Group::new("g", limits(0), now);
        let a = join_new(&mut g, now, &["range"]);
        g.sync(
            now,
            &a,
            None,
            1,
            None,
            None,
            vec![(a.clone(), Bytes::from("A"))],
        );
        let record = g.record();
        let r = Group::restore("g", record, limits(0), now);
        assert_eq!(r.state, GroupState::Stable);
        assert_eq!(r.generation, 1);
        assert_eq!(r.members[&a].assignment, "A");
    }
}
