//! One group of the KIP-848 consumer protocol (ConsumerGroupHeartbeat) as a pure state
//! machine: the broker assigns partitions, members converge to their target assignment by
//! heartbeating.
//!
//! Epochs, as in Kafka's `ConsumerGroup`: the group epoch moves on every membership,
//! subscription or partition-count change; the target assignment is recomputed for it and
//! stamped with the same assignment epoch. A member reaches the assignment epoch once it has
//! given up (and confirmed giving up, by listing what it owns) every partition that is no
//! longer its; it is given a partition only after the previous owner has let go, so no
//! partition is ever owned by two members.
//!
//! State is persisted as Kafka's coordinator does it, one record for the group (epochs and
//! the partition counts the target was computed from) and one per member (its epochs,
//! subscription, what it owns, what it is revoking, its target): [`ConsumerGroup::take_changes`]
//! hands out the records that changed since the last call, and [`ConsumerGroup::restore`]
//! rebuilds the group from them with fresh session deadlines. A coordinator that takes over
//! after a restart or a failover therefore knows every member, its epoch and its partitions,
//! and the members carry on without rejoining.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::ResponseError;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// A topic partition by name.
pub type Tp = (String, i32);

/// What a group needs to know of the cluster's topics.
pub trait TopicView {
    /// A topic's partition count (None: no such topic).
    fn partitions(&self, topic: &str) -> Option<i32>;
    /// Every topic's name, to resolve regular expressions against.
    fn names(&self) -> Vec<String>;
    /// Moves whenever a topic is created or deleted: regular expressions are resolved
    /// again only then.
    fn version(&self) -> u64;
}

/// The assignors the broker runs (`group.consumer.assignors`); the first is the default.
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// The epoch of a static member that left for a restart (LEAVE_GROUP_STATIC_MEMBER_EPOCH).
const STATIC_LEFT: i32 = -2;

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    previous_epoch: i32,
    pub rebalance_timeout: Duration,
    pub subscribed: Vec<String>,
    /// SubscribedTopicRegex: the member also subscribes to every topic whose whole name
    /// matches it (RE2 syntax, as Kafka's RE2/J).
    pub regex: Option<String>,
    /// What the member subscribes to: `subscribed` and the topics `regex` resolved to.
    pub topics: BTreeSet<String>,
    pub assignor: Option<String>,
    /// What the member has been told it owns.
    pub assigned: BTreeSet<Tp>,
    /// Taken away, but the member has not yet confirmed letting go.
    pub revoking: BTreeSet<Tp>,
    /// The assignment in our last answer, to send it again only when it changes.
    last_sent: Option<BTreeSet<Tp>>,
    deadline: Instant,
}

/// A ConsumerGroupHeartbeat request, decoded (topic ids already mapped to names).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout: Duration,
    pub subscribed: Option<Vec<String>>,
    pub regex: Option<String>,
    pub assignor: Option<String>,
    /// What the member owns now, when it says (null = unchanged since last time).
    pub owned: Option<Vec<Tp>>,
    /// Whether the client must make up its member id even to join (KIP-1082, v1+).
    pub member_id_required: bool,
    /// The group's `consumer.session.timeout.ms`, when it sets one (else the broker's).
    pub session_timeout: Option<Duration>,
}

impl Heartbeat {
    /// The request-shape checks Kafka makes before the group is looked at: the message of
    /// the INVALID_REQUEST to answer, if any.
    pub fn invalid(&self) -> Option<&'static str> {
        if self.member_id_required && self.member_id.is_empty() {
            return Some("MemberId can't be empty.");
        }
        if self.epoch == 0 && self.subscribed.is_none() && self.regex.is_none() {
            return Some(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in the first request.",
            );
        }
        None
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatResult {
    pub error: Option<(ResponseError, String)>,
    pub member_id: String,
    pub epoch: i32,
    /// Present when it changed (or on joining): the member's whole assignment.
    pub assignment: Option<BTreeSet<Tp>>,
}

impl HeartbeatResult {
    pub fn error(e: ResponseError, msg: impl Into<String>, member_id: &str) -> HeartbeatResult {
        HeartbeatResult {
            error: Some((e, msg.into())),
            member_id: member_id.to_string(),
            epoch: -1,
            assignment: None,
        }
    }
}

/// The group's persisted record: Kafka's ConsumerGroupMetadata (the group epoch),
/// TargetAssignmentMetadata (the assignment epoch) and the partition counts of the
/// subscribed topics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub topics: BTreeMap<String, i32>,
    /// The topics each regular expression resolved to (Kafka's ConsumerGroupRegularExpression
    /// records), so that a coordinator taking over starts from them and moves no epoch when
    /// they still match the same topics.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resolved: BTreeMap<String, BTreeSet<String>>,
}

/// A member's persisted record: Kafka's ConsumerGroupMemberMetadata, ConsumerGroupCurrent
/// MemberAssignment and TargetAssignmentMember in one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub rebalance_timeout_ms: u64,
    pub subscribed: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    pub assignor: Option<String>,
    pub assigned: BTreeSet<Tp>,
    pub revoking: BTreeSet<Tp>,
    pub target: BTreeSet<Tp>,
}

/// A persisted record that changed: `None` deletes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Group(Option<GroupRecord>),
    Member(String, Option<Box<MemberRecord>>),
}

#[derive(Debug, Default)]
pub struct ConsumerGroup {
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    pub target: BTreeMap<String, BTreeSet<Tp>>,
    /// Partition counts of the subscribed topics the target was computed from.
    topics_seen: BTreeMap<String, i32>,
    /// The topics each of the members' regular expressions matches, and the version of the
    /// topic set they were resolved against (none for a restored group: it resolves them
    /// again on its first heartbeat).
    resolved: BTreeMap<String, BTreeSet<String>>,
    resolved_version: Option<u64>,
    /// The records as last handed out by `take_changes`, to hand out only what changed.
    stored: Option<GroupRecord>,
    stored_members: BTreeMap<String, MemberRecord>,
    /// Members a heartbeat may have changed since then (all of them when an epoch moved).
    touched: BTreeSet<String>,
}

impl ConsumerGroup {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Rebuilds a group from its records; every member's session starts afresh at `now`.
    pub fn restore(
        record: Option<GroupRecord>,
        members: Vec<(String, MemberRecord)>,
        now: Instant,
        session_timeout: Duration,
    ) -> ConsumerGroup {
        let mut g = ConsumerGroup::default();
        if let Some(r) = &record {
            g.epoch = r.epoch;
            g.assignment_epoch = r.assignment_epoch;
            g.topics_seen = r.topics.clone();
            g.resolved = r.resolved.clone();
        }
        for (id, m) in &members {
            g.target.insert(id.clone(), m.target.clone());
            g.members.insert(
                id.clone(),
                ConsumerMember {
                    id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms),
                    subscribed: m.subscribed.clone(),
                    regex: m.regex.clone(),
                    topics: m
                        .subscribed
                        .iter()
                        .chain(
                            m.regex
                                .iter()
                                .flat_map(|r| g.resolved.get(r).into_iter().flatten()),
                        )
                        .cloned()
                        .collect(),
                    assignor: m.assignor.clone(),
                    assigned: m.assigned.clone(),
                    revoking: m.revoking.clone(),
                    last_sent: None,
                    deadline: now + session_timeout,
                },
            );
        }
        g.stored = record;
        g.stored_members = members.into_iter().collect();
        g
    }

    fn record(&self) -> GroupRecord {
        GroupRecord {
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            topics: self.topics_seen.clone(),
            resolved: self.resolved.clone(),
        }
    }

    fn member_record(&self, id: &str) -> Option<MemberRecord> {
        let m = self.members.get(id)?;
        Some(MemberRecord {
            instance_id: m.instance_id.clone(),
            rack_id: m.rack_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            epoch: m.epoch,
            previous_epoch: m.previous_epoch,
            rebalance_timeout_ms: m.rebalance_timeout.as_millis() as u64,
            subscribed: m.subscribed.clone(),
            regex: m.regex.clone(),
            assignor: m.assignor.clone(),
            assigned: m.assigned.clone(),
            revoking: m.revoking.clone(),
            target: self.target.get(id).cloned().unwrap_or_default(),
        })
    }

    /// The records that changed since the last call. A group that never had a member
    /// writes nothing.
    pub fn take_changes(&mut self) -> Vec<Change> {
        let touched = std::mem::take(&mut self.touched);
        if self.stored.is_none() && self.members.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let record = self.record();
        // When an epoch moved, any member's target may have moved with it.
        let ids: BTreeSet<String> = if self.stored.as_ref() != Some(&record) {
            self.stored = Some(record.clone());
            out.push(Change::Group(Some(record)));
            self.members
                .keys()
                .chain(self.stored_members.keys())
                .cloned()
                .collect()
        } else {
            touched
        };
        for id in ids {
            let now = self.member_record(&id);
            if self.stored_members.get(&id) == now.as_ref() {
                continue;
            }
            match &now {
                Some(r) => self.stored_members.insert(id.clone(), r.clone()),
                None => self.stored_members.remove(&id),
            };
            out.push(Change::Member(id, now.map(Box::new)));
        }
        out
    }

    /// The deletes of every stored record, for a group that is being forgotten.
    pub fn take_removal(&mut self) -> Vec<Change> {
        let mut out: Vec<Change> = std::mem::take(&mut self.stored_members)
            .into_keys()
            .map(|id| Change::Member(id, None))
            .collect();
        if self.stored.take().is_some() {
            out.push(Change::Group(None));
        }
        out
    }

    /// Kafka's names: Empty, Assigning, Reconciling, Stable.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.assignment_epoch || !m.revoking.is_empty())
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    pub fn assignor_name(&self) -> &'static str {
        let wanted = self.members.values().find_map(|m| m.assignor.as_deref());
        ASSIGNORS
            .iter()
            .copied()
            .find(|a| Some(*a) == wanted)
            .unwrap_or(ASSIGNORS[0])
    }

    /// Handles one heartbeat against the cluster's `topics`.
    pub fn heartbeat(
        &mut self,
        now: Instant,
        session_timeout: Duration,
        h: Heartbeat,
        topics: &dyn TopicView,
    ) -> HeartbeatResult {
        if let Some(r) = h.regex.as_deref().filter(|r| !r.is_empty()) {
            // Kafka checks a pattern when it is new to the group.
            let known = self.members.values().any(|m| m.regex.as_deref() == Some(r));
            if let (false, Err(e)) = (known, compile_regex(r)) {
                return HeartbeatResult::error(
                    ResponseError::InvalidRegularExpression,
                    format!("SubscribedTopicRegex `{r}` is not a valid regular expression: {e}."),
                    &h.member_id,
                );
            }
        }
        if let Some(a) = h.assignor.as_deref() {
            if !ASSIGNORS.contains(&a) {
                return HeartbeatResult::error(
                    ResponseError::UnsupportedAssignor,
                    format!("assignor {a} is not one of {ASSIGNORS:?}"),
                    &h.member_id,
                );
            }
        }
        let mut replaced_static = false;
        let id = match h.epoch {
            -1 | -2 => return self.leave(now, session_timeout, &h),
            0 => match self.join(now, session_timeout, &h) {
                Ok((id, replaced)) => {
                    replaced_static = replaced;
                    id
                }
                Err(refused) => return refused,
            },
            e => {
                let Some(m) = self.members.get(&h.member_id) else {
                    let taken = h.instance_id.as_ref().filter(|i| {
                        self.members
                            .values()
                            .any(|m| m.instance_id.as_ref() == Some(*i))
                    });
                    if let Some(instance) = taken {
                        return HeartbeatResult::error(
                            ResponseError::FencedInstanceId,
                            format!("instance id {instance} belongs to another member now"),
                            &h.member_id,
                        );
                    }
                    return HeartbeatResult::error(
                        ResponseError::UnknownMemberId,
                        format!("member {} is not in the group", h.member_id),
                        &h.member_id,
                    );
                };
                // A member that missed our last answer may still speak with its previous
                // epoch, as long as it owns nothing it was not given.
                let lost_answer = e == m.previous_epoch
                    && h.owned
                        .as_ref()
                        .is_some_and(|o| o.iter().all(|tp| m.assigned.contains(tp)));
                if e != m.epoch && !lost_answer {
                    return HeartbeatResult::error(
                        ResponseError::FencedMemberEpoch,
                        format!("epoch {e} is not the member's epoch {}", m.epoch),
                        &h.member_id,
                    );
                }
                if lost_answer {
                    self.members.get_mut(&h.member_id).expect("found").last_sent = None;
                }
                h.member_id.clone()
            }
        };
        self.touched.insert(id.clone());
        // One heartbeat moves the group epoch once at most, as in Kafka: joining, a new
        // subscription and new partition counts together are one change.
        let mut bump = h.epoch == 0 && !replaced_static;
        let m = self.members.get_mut(&id).expect("member present");
        m.deadline = now + session_timeout;
        if let Some(s) = &h.subscribed {
            let mut s = s.clone();
            s.sort();
            s.dedup();
            if s != m.subscribed {
                m.subscribed = s;
                bump = true;
            }
        }
        // A pattern the group has not resolved yet is resolved after this heartbeat, as
        // Kafka resolves new patterns off the heartbeat path: this answer assigns the
        // named topics, and the matches come with a later one (librdkafka's 0045 expects
        // exactly that). A pattern another member already uses comes resolved at once.
        let mut unresolved = None;
        if let Some(r) = &h.regex {
            // an empty pattern clears it
            let r = Some(r.clone()).filter(|r| !r.is_empty());
            if r != m.regex {
                unresolved = r.clone().filter(|r| !self.resolved.contains_key(r));
                m.regex = r;
                bump = true;
            }
        }
        if h.assignor.is_some() {
            m.assignor = h.assignor.clone();
        }
        let m = self.members.get_mut(&id).expect("member present");
        if let Some(owned) = &h.owned {
            // what it no longer lists is released
            m.revoking.retain(|tp| owned.contains(tp));
        }
        self.refresh(topics, bump, unresolved.as_deref());
        self.reconcile(&id);
        let m = self.members.get_mut(&id).expect("member present");
        let changed = m.last_sent.as_ref() != Some(&m.assigned);
        let reported_differs = h
            .owned
            .as_ref()
            .is_some_and(|o| o.iter().cloned().collect::<BTreeSet<Tp>>() != m.assigned);
        let assignment = if changed || reported_differs || h.epoch == 0 {
            m.last_sent = Some(m.assigned.clone());
            Some(m.assigned.clone())
        } else {
            None
        };
        HeartbeatResult {
            error: None,
            member_id: id,
            epoch: m.epoch,
            assignment,
        }
    }

    fn join(
        &mut self,
        now: Instant,
        session_timeout: Duration,
        h: &Heartbeat,
    ) -> Result<(String, bool), HeartbeatResult> {
        let id = if h.member_id.is_empty() {
            uuid::Uuid::new_v4().simple().to_string()
        } else {
            h.member_id.clone()
        };
        // A static member restarting takes over its old slot, with what it owned, once
        // the old one left with epoch -2; while the old one is still in the group the
        // newcomer is refused (Kafka's KIP-848 rule: UNRELEASED_INSTANCE_ID).
        let mut inherited = None;
        if let Some(instance) = &h.instance_id {
            let old = self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(instance) && m.id != id);
            if let Some(old) = old {
                if old.epoch != STATIC_LEFT {
                    return Err(HeartbeatResult::error(
                        ResponseError::UnreleasedInstanceId,
                        format!(
                            "Static member {id} with instance id {instance} cannot join the \
                             group because the instance id is owned by member {}.",
                            old.id
                        ),
                        &h.member_id,
                    ));
                }
                let old = old.id.clone();
                let m = self.members.remove(&old).expect("found");
                if let Some(target) = self.target.remove(&old) {
                    self.target.insert(id.clone(), target);
                }
                self.touched.insert(old);
                inherited = Some(m);
            }
        }
        self.members.insert(
            id.clone(),
            ConsumerMember {
                id: id.clone(),
                instance_id: h.instance_id.clone(),
                rack_id: h.rack_id.clone(),
                client_id: h.client_id.clone(),
                client_host: h.client_host.clone(),
                epoch: 0,
                previous_epoch: -1,
                rebalance_timeout: h.rebalance_timeout,
                subscribed: Vec::new(),
                regex: None,
                topics: BTreeSet::new(),
                assignor: None,
                assigned: BTreeSet::new(),
                revoking: BTreeSet::new(),
                last_sent: None,
                deadline: now + session_timeout,
            },
        );
        let replaced = inherited.is_some();
        if let Some(old) = inherited {
            // what it subscribed to and owned carries over: no rebalance unless the new
            // incarnation subscribes to something else
            let m = self.members.get_mut(&id).expect("just inserted");
            m.subscribed = old.subscribed;
            m.regex = old.regex;
            m.topics = old.topics;
            m.assignor = old.assignor;
            m.assigned = old.assigned;
            m.revoking = old.revoking;
        }
        Ok((id, replaced))
    }

    fn leave(&mut self, now: Instant, session_timeout: Duration, h: &Heartbeat) -> HeartbeatResult {
        let Some(m) = self.members.get_mut(&h.member_id) else {
            return HeartbeatResult::error(
                ResponseError::UnknownMemberId,
                format!("member {} is not in the group", h.member_id),
                &h.member_id,
            );
        };
        if h.epoch == STATIC_LEFT && m.instance_id.is_some() {
            // A static member going away for a restart keeps its partitions (nobody else
            // gets them) until its session ends or its next incarnation joins.
            m.epoch = STATIC_LEFT;
            m.deadline = now + session_timeout;
            self.touched.insert(h.member_id.clone());
            return HeartbeatResult {
                error: None,
                member_id: h.member_id.clone(),
                epoch: h.epoch,
                assignment: None,
            };
        }
        self.members.remove(&h.member_id);
        self.target.remove(&h.member_id);
        self.epoch += 1;
        self.forget_unused_patterns();
        HeartbeatResult {
            error: None,
            member_id: h.member_id.clone(),
            epoch: h.epoch,
            assignment: None,
        }
    }

    /// Removes members whose session expired.
    pub fn tick(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.deadline <= now)
            .map(|m| m.id.clone())
            .collect();
        for id in expired {
            tracing::info!(member = %id, "consumer group member session expired");
            self.members.remove(&id);
            self.target.remove(&id);
            self.epoch += 1;
        }
        self.forget_unused_patterns();
    }

    /// Drops the resolution of patterns no member subscribes with any more (Kafka writes
    /// a tombstone when the last member using one leaves): a member bringing one back
    /// gets it resolved anew.
    fn forget_unused_patterns(&mut self) {
        let members = &self.members;
        self.resolved
            .retain(|r, _| members.values().any(|m| m.regex.as_ref() == Some(r)));
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.members.values().map(|m| m.deadline).min()
    }

    /// Checks an OffsetCommit from a member (epoch -1 and no member: an assign()-only
    /// consumer, allowed while the group has no members).
    pub fn check_commit(&self, member_id: &str, epoch: i32) -> Result<(), ResponseError> {
        if member_id.is_empty() && epoch < 0 {
            return match self.members.is_empty() {
                true => Ok(()),
                false => Err(ResponseError::UnknownMemberId),
            };
        }
        let m = self
            .members
            .get(member_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        if epoch != m.epoch {
            return Err(ResponseError::StaleMemberEpoch);
        }
        Ok(())
    }

    /// Moves the group epoch when `bump` says membership changed, or what a member
    /// subscribes to did (a regular expression now matching other topics), or a subscribed
    /// topic's partition count did; recomputes the target assignment when the group epoch
    /// moved (here or earlier, by a session expiring).
    fn refresh(&mut self, view: &dyn TopicView, mut bump: bool, not_yet: Option<&str>) {
        self.resolve(view, not_yet);
        for m in self.members.values_mut() {
            let mut topics: BTreeSet<String> = m.subscribed.iter().cloned().collect();
            if let Some(matched) = m.regex.as_ref().and_then(|r| self.resolved.get(r)) {
                topics.extend(matched.iter().cloned());
            }
            if topics != m.topics {
                m.topics = topics;
                bump = true;
            }
        }
        let topics: BTreeSet<&String> = self.members.values().flat_map(|m| &m.topics).collect();
        let seen: BTreeMap<String, i32> = topics
            .into_iter()
            .filter_map(|t| view.partitions(t).map(|n| (t.clone(), n)))
            .collect();
        if seen != self.topics_seen {
            self.topics_seen = seen;
            bump = true;
        }
        if bump {
            self.epoch += 1;
        }
        if self.assignment_epoch == self.epoch {
            return;
        }
        self.target = match self.assignor_name() {
            "range" => range(&self.members, &self.topics_seen),
            _ => uniform(&self.members, &self.topics_seen, &self.target),
        };
        self.assignment_epoch = self.epoch;
    }

    /// Resolves the members' regular expressions against every topic, as Kafka's
    /// `refreshRegularExpressions`: again when the set of topics changed, and for a pattern
    /// the group has not resolved yet, except `not_yet` (a pattern that arrived in this
    /// heartbeat). A pattern no member uses any more is forgotten.
    fn resolve(&mut self, view: &dyn TopicView, not_yet: Option<&str>) {
        self.forget_unused_patterns();
        let wanted: BTreeSet<&String> = self
            .members
            .values()
            .filter_map(|m| m.regex.as_ref())
            .filter(|r| Some(r.as_str()) != not_yet)
            .collect();
        let version = view.version();
        let stale = self.resolved_version != Some(version)
            || wanted.iter().any(|r| !self.resolved.contains_key(*r));
        if wanted.is_empty() || !stale {
            return;
        }
        let compiled: Vec<(&String, Option<regex::Regex>)> =
            wanted.iter().map(|r| (*r, compile_regex(r).ok())).collect();
        let names = view.names();
        let mut resolved = BTreeMap::new();
        for (r, re) in compiled {
            let matched: BTreeSet<String> = match re {
                Some(re) => names.iter().filter(|n| re.is_match(n)).cloned().collect(),
                None => BTreeSet::new(),
            };
            resolved.insert(r.clone(), matched);
        }
        self.resolved = resolved;
        self.resolved_version = Some(version);
    }

    /// Moves one member towards its target: first revoke, then (once confirmed) take the
    /// new epoch and the free partitions of its target.
    fn reconcile(&mut self, id: &str) {
        let desired = self.target.get(id).cloned().unwrap_or_default();
        let held_by_others: BTreeSet<Tp> = self
            .members
            .values()
            .filter(|m| m.id != id)
            .flat_map(|m| m.assigned.iter().chain(&m.revoking).cloned())
            .collect();
        let assignment_epoch = self.assignment_epoch;
        let m = self.members.get_mut(id).expect("member present");
        let to_revoke: Vec<Tp> = m.assigned.difference(&desired).cloned().collect();
        if !to_revoke.is_empty() {
            for tp in to_revoke {
                m.assigned.remove(&tp);
                m.revoking.insert(tp);
            }
            return;
        }
        if !m.revoking.is_empty() {
            return;
        }
        for tp in desired.difference(&held_by_others) {
            m.assigned.insert(tp.clone());
        }
        if m.epoch != assignment_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = assignment_epoch;
        }
    }
}

/// A SubscribedTopicRegex as a matcher of whole topic names (Kafka's `matches()`). The
/// pattern is checked alone first, so that one like `a)|(b` is refused rather than
/// accepted through the anchoring group.
fn compile_regex(r: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(r).map_err(|e| one_line(&e))?;
    regex::Regex::new(&format!("^(?:{r})$")).map_err(|e| one_line(&e))
}

fn one_line(e: &regex::Error) -> String {
    match e {
        regex::Error::Syntax(s) => s
            .lines()
            .filter(|l| l.starts_with("error:"))
            .map(|l| l.trim_start_matches("error:").trim().to_string())
            .next()
            .unwrap_or_else(|| s.lines().last().unwrap_or_default().to_string()),
        other => other.to_string(),
    }
}

/// Every partition of the subscribed topics, spread evenly over the members subscribed to
/// each, keeping partitions where they are while that keeps the balance (sticky).
fn uniform(
    members: &BTreeMap<String, ConsumerMember>,
    topics: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, BTreeSet<Tp>>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut out: BTreeMap<String, BTreeSet<Tp>> = members
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    let all: Vec<Tp> = topics
        .iter()
        .flat_map(|(t, n)| (0..*n).map(move |p| (t.clone(), p)))
        .collect();
    if members.is_empty() {
        return out;
    }
    let quota = all.len().div_ceil(members.len());
    let eligible = |tp: &Tp| -> Vec<&String> {
        members
            .values()
            .filter(|m| m.topics.contains(&tp.0))
            .map(|m| &m.id)
            .collect()
    };
    let mut left = Vec::new();
    for tp in &all {
        let keeper = previous
            .iter()
            .find(|(_, tps)| tps.contains(tp))
            .map(|(m, _)| m)
            .filter(|m| {
                members.get(*m).is_some_and(|x| x.topics.contains(&tp.0))
                    && out.get(*m).is_some_and(|a| a.len() < quota)
            });
        match keeper {
            Some(m) => {
                out.get_mut(m).expect("member").insert(tp.clone());
            }
            None => left.push(tp.clone()),
        }
    }
    // the most constrained partitions (fewest subscribed members) first
    left.sort_by_key(|tp| eligible(tp).len());
    for tp in left {
        if let Some(m) = eligible(&tp)
            .into_iter()
            .min_by_key(|m| (out[*m].len(), (*m).clone()))
        {
            out.get_mut(m).expect("member").insert(tp);
        }
    }
    out
}

/// Kafka's range assignor per topic: contiguous ranges, the first members one more.
fn range(
    members: &BTreeMap<String, ConsumerMember>,
    topics: &BTreeMap<String, i32>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut out: BTreeMap<String, BTreeSet<Tp>> = members
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for (t, n) in topics {
        let subs: Vec<&String> = members
            .values()
            .filter(|m| m.topics.contains(t))
            .map(|m| &m.id)
            .collect();
        if subs.is_empty() {
            continue;
        }
        let (each, extra) = (*n as usize / subs.len(), *n as usize % subs.len());
        let mut p = 0i32;
        for (i, m) in subs.iter().enumerate() {
            let count = each + usize::from(i < extra);
            for _ in 0..count {
                out.get_mut(*m).expect("member").insert((t.clone(), p));
                p += 1;
            }
        }
    }
    out
}

/// A partition-count function is a view with no topic names (tests without regexes).
#[cfg(test)]
impl<F: Fn(&str) -> Option<i32>> TopicView for F {
    fn partitions(&self, topic: &str) -> Option<i32> {
        self(topic)
    }
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
    fn version(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: Duration = Duration::from_secs(45);

    fn parts(t: &str) -> Option<i32> {
        match t {
            "t" => Some(4),
            "u" => Some(2),
            _ => None,
        }
    }

    fn hb(member: &str, epoch: i32, owned: Option<&BTreeSet<Tp>>) -> Heartbeat {
        Heartbeat {
            member_id: member.to_string(),
            epoch,
            session_timeout: None,
            subscribed: (epoch == 0).then(|| vec!["t".to_string()]),
            owned: owned.map(|o| o.iter().cloned().collect()),
            rebalance_timeout: Duration::from_secs(30),
            ..Default::default()
        }
    }

    fn tps(list: &[i32]) -> BTreeSet<Tp> {
        list.iter().map(|p| ("t".to_string(), *p)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn members_converge_without_sharing_a_partition() {
        let now = Instant::now();
        let mut g = ConsumerGroup::default();
        let a = g.heartbeat(now, SESSION, hb("a", 0, None), &parts);
        assert_eq!(a.error, None);
        assert_eq!(a.assignment, Some(tps(&[0, 1, 2, 3])));
        assert_eq!(g.state_name(), "Stable");
        let a_epoch = a.epoch;

        // b joins: the target splits 2/2, but b gets nothing until a lets go
        let b = g.heartbeat(now, SESSION, hb("b", 0, None), &parts);
        assert_eq!(b.assignment, Some(BTreeSet::new()));
        assert_eq!(g.state_name(), "Reconciling");
        // a join with its subscription and the new topic counts is one epoch, as in Kafka
        assert_eq!((a.epoch, g.epoch), (1, 2));
        // a is told to keep only its half; its epoch does not move yet
        let a2 = g.heartbeat(now, SESSION, hb("a", a_epoch, None), &parts);
        let kept = a2.assignment.clone().unwrap();
        assert_eq!(kept.len(), 2);
        assert_eq!(a2.epoch, a_epoch, "epoch moves only after the revocation");
        // b still waits: a has not confirmed
        let b2 = g.heartbeat(now, SESSION, hb("b", b.epoch, None), &parts);
        assert_eq!(b2.assignment, None, "nothing new for b yet");
        // a confirms by listing what it owns now
        let a3 = g.heartbeat(now, SESSION, hb("a", a_epoch, Some(&kept)), &parts);
        assert!(a3.epoch > a_epoch);
        let b3 = g.heartbeat(now, SESSION, hb("b", b2.epoch, None), &parts);
        let got = b3.assignment.unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.is_disjoint(&kept));
        assert_eq!(g.state_name(), "Stable");
        // an epoch the member does not have is fenced; an unknown member is refused
        let stale = g.heartbeat(now, SESSION, hb("a", a3.epoch + 1, None), &parts);
        assert_eq!(stale.error.unwrap().0, ResponseError::FencedMemberEpoch);
        let unknown = g.heartbeat(now, SESSION, hb("zz", 3, None), &parts);
        assert_eq!(unknown.error.unwrap().0, ResponseError::UnknownMemberId);
        // b leaves: a gets everything back
        let left = g.heartbeat(now, SESSION, hb("b", -1, None), &parts);
        assert_eq!((left.error, left.epoch), (None, -1));
        let a4 = g.heartbeat(now, SESSION, hb("a", a3.epoch, None), &parts);
        assert_eq!(a4.assignment, Some(tps(&[0, 1, 2, 3])));
    }

    /// Applies changes to a map of records, as the store does.
    fn apply(
        store: &mut (Option<GroupRecord>, BTreeMap<String, MemberRecord>),
        changes: Vec<Change>,
    ) {
        for c in changes {
            match c {
                Change::Group(r) => store.0 = r,
                Change::Member(id, Some(r)) => {
                    store.1.insert(id, *r);
                }
                Change::Member(id, None) => {
                    store.1.remove(&id);
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn state_survives_its_records_and_members_carry_on() {
        let now = Instant::now();
        let mut g = ConsumerGroup::default();
        let mut store = Default::default();
        assert!(
            g.take_changes().is_empty(),
            "nothing to write before a member"
        );
        let a = g.heartbeat(now, SESSION, hb("a", 0, None), &parts);
        apply(&mut store, g.take_changes());
        let b = g.heartbeat(now, SESSION, hb("b", 0, None), &parts);
        apply(&mut store, g.take_changes());
        // a is revoking half: the restored group must know it
        let a2 = g.heartbeat(now, SESSION, hb("a", a.epoch, None), &parts);
        apply(&mut store, g.take_changes());
        let kept = a2.assignment.clone().unwrap();
        // a steady heartbeat changes nothing worth writing
        g.heartbeat(now, SESSION, hb("b", b.epoch, None), &parts);
        assert_eq!(g.take_changes(), vec![]);

        let members: Vec<(String, MemberRecord)> = store.1.clone().into_iter().collect();
        assert_eq!(members.len(), 2);
        let mut r = ConsumerGroup::restore(store.0.clone(), members, now, SESSION);
        assert_eq!((r.epoch, r.assignment_epoch), (g.epoch, g.assignment_epoch));
        assert_eq!(r.target, g.target);
        assert_eq!(r.state_name(), "Reconciling");
        assert_eq!(r.members["a"].revoking, g.members["a"].revoking);
        assert_eq!(
            r.next_deadline(),
            Some(now + SESSION),
            "sessions start afresh"
        );
        assert!(
            r.take_changes().is_empty(),
            "restored records are not written again"
        );
        // b heartbeats with its epoch and is not fenced; it still waits for a's partitions
        let b2 = r.heartbeat(now, SESSION, hb("b", b.epoch, None), &parts);
        assert_eq!((b2.error, b2.epoch), (None, b.epoch));
        // a confirms its revocation to the new coordinator; b then gets the rest
        let a3 = r.heartbeat(now, SESSION, hb("a", a.epoch, Some(&kept)), &parts);
        assert_eq!(a3.error, None);
        assert_eq!(a3.epoch, r.assignment_epoch);
        let b3 = r.heartbeat(now, SESSION, hb("b", b2.epoch, None), &parts);
        assert_eq!(b3.assignment.unwrap().len(), 2);
        assert_eq!(r.state_name(), "Stable");
        assert_eq!(
            r.epoch, g.epoch,
            "no rebalance: the group epoch did not move"
        );
        // leaving deletes the member's record; forgetting the group deletes the rest
        r.heartbeat(now, SESSION, hb("a", -1, None), &parts);
        r.heartbeat(now, SESSION, hb("b", -1, None), &parts);
        let changes = r.take_changes();
        assert!(changes.contains(&Change::Member("a".into(), None)));
        assert!(changes.contains(&Change::Member("b".into(), None)));
        assert_eq!(r.take_removal(), vec![Change::Group(None)]);
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_expire() {
        let t0 = Instant::now();
        let mut g = ConsumerGroup::default();
        g.heartbeat(t0, SESSION, hb("a", 0, None), &parts);
        assert_eq!(g.next_deadline(), Some(t0 + SESSION));
        tokio::time::advance(SESSION).await;
        g.tick(Instant::now());
        assert!(g.is_empty());
        assert_eq!(g.state_name(), "Empty");
    }

    #[tokio::test(start_paused = true)]
    async fn commits_need_the_current_epoch() {
        let now = Instant::now();
        let mut g = ConsumerGroup::default();
        assert_eq!(g.check_commit("", -1), Ok(()));
        let a = g.heartbeat(now, SESSION, hb("a", 0, None), &parts);
        assert_eq!(g.check_commit("a", a.epoch), Ok(()));
        assert_eq!(
            g.check_commit("a", a.epoch - 1),
            Err(ResponseError::StaleMemberEpoch)
        );
        assert_eq!(g.check_commit("", -1), Err(ResponseError::UnknownMemberId));
    }

    #[test]
    fn assignors_balance() {
        let member = |id: &str, topics: &[&str]| ConsumerMember {
            id: id.into(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            epoch: 0,
            previous_epoch: -1,
            rebalance_timeout: Duration::ZERO,
            subscribed: topics.iter().map(|t| t.to_string()).collect(),
            regex: None,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            assignor: None,
            assigned: BTreeSet::new(),
            revoking: BTreeSet::new(),
            last_sent: None,
            deadline: Instant::now(),
        };
        let members: BTreeMap<String, ConsumerMember> = [
            ("a", &["t", "u"][..]),
            ("b", &["t", "u"][..]),
            ("c", &["t"][..]),
        ]
        .iter()
        .map(|(id, ts)| (id.to_string(), member(id, ts)))
        .collect();
        let topics: BTreeMap<String, i32> = [("t".into(), 4), ("u".into(), 2)].into();
        let u = uniform(&members, &topics, &BTreeMap::new());
        let sizes: Vec<usize> = u.values().map(|s| s.len()).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 6);
        assert!(sizes.iter().all(|n| *n == 2), "{u:?}");
        assert!(
            !u["c"].iter().any(|(t, _)| t == "u"),
            "c is not subscribed to u"
        );
        // sticky: the same members keep the same partitions
        assert_eq!(uniform(&members, &topics, &u), u);
        let r = range(&members, &topics);
        assert_eq!(
            r["a"],
            [("t".into(), 0), ("t".into(), 1), ("u".into(), 0)].into()
        );
        assert_eq!(r["c"], [("t".into(), 3)].into());
    }

    /// A cluster of topics a test can add to.
    struct Cluster(BTreeMap<String, i32>, u64);

    impl TopicView for Cluster {
        fn partitions(&self, topic: &str) -> Option<i32> {
            self.0.get(topic).copied()
        }
        fn names(&self) -> Vec<String> {
            self.0.keys().cloned().collect()
        }
        fn version(&self) -> u64 {
            self.1
        }
    }

    fn by_regex(member: &str, epoch: i32, regex: Option<&str>) -> Heartbeat {
        Heartbeat {
            member_id: member.to_string(),
            epoch,
            session_timeout: None,
            regex: regex.map(str::to_string),
            rebalance_timeout: Duration::from_secs(30),
            ..Default::default()
        }
    }

    fn topics_of(a: &BTreeSet<Tp>) -> BTreeSet<String> {
        a.iter().map(|(t, _)| t.clone()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn regex_subscriptions_follow_the_topics_that_match() {
        let now = Instant::now();
        let mut cluster = Cluster(
            [
                ("orders.eu".into(), 2),
                ("orders.us".into(), 1),
                ("xorders.eu".into(), 1),
                ("audit".into(), 1),
            ]
            .into(),
            1,
        );
        let mut g = ConsumerGroup::default();
        let a = g.heartbeat(
            now,
            SESSION,
            by_regex("a", 0, Some(r"orders\..*")),
            &cluster,
        );
        assert_eq!(a.error, None);
        // a new pattern is resolved after the heartbeat that brought it
        assert_eq!(a.assignment, Some(BTreeSet::new()));
        let a = g.heartbeat(now, SESSION, by_regex("a", a.epoch, None), &cluster);
        // the whole name must match, as Java's matches(): not xorders.eu
        assert_eq!(
            topics_of(a.assignment.as_ref().unwrap()),
            ["orders.eu".to_string(), "orders.us".to_string()].into()
        );
        assert_eq!(a.assignment.as_ref().unwrap().len(), 3);
        let epoch = g.epoch;

        // nothing changed: no new epoch
        let a2 = g.heartbeat(now, SESSION, by_regex("a", a.epoch, None), &cluster);
        assert_eq!((a2.error, g.epoch, a2.assignment), (None, epoch, None));

        // a topic created that matches: the next heartbeat assigns it
        cluster.0.insert("orders.apac".into(), 1);
        cluster.1 += 1;
        let a3 = g.heartbeat(now, SESSION, by_regex("a", a.epoch, None), &cluster);
        assert_eq!(g.epoch, epoch + 1);
        assert!(a3
            .assignment
            .unwrap()
            .contains(&("orders.apac".to_string(), 0)));
        // one that does not match changes nothing
        cluster.0.insert("payments".into(), 1);
        cluster.1 += 1;
        g.heartbeat(now, SESSION, by_regex("a", a3.epoch, None), &cluster);
        assert_eq!(g.epoch, epoch + 1);

        // a second member with names and the same pattern shares the partitions
        let b = g.heartbeat(
            now,
            SESSION,
            Heartbeat {
                subscribed: Some(vec!["audit".into()]),
                ..by_regex("b", 0, Some(r"orders\..*"))
            },
            &cluster,
        );
        assert_eq!(b.error, None);
        assert_eq!(
            g.members["b"].topics,
            ["audit", "orders.apac", "orders.eu", "orders.us"]
                .map(String::from)
                .into()
        );
        assert_eq!(g.target["a"].len() + g.target["b"].len(), 5);
        assert!(g.target["b"].contains(&("audit".to_string(), 0)));

        // a deleted topic leaves the assignment
        cluster.0.remove("orders.us");
        cluster.1 += 1;
        g.heartbeat(now, SESSION, by_regex("a", a3.epoch, None), &cluster);
        assert!(!g.target.values().flatten().any(|(t, _)| t == "orders.us"));

        // an empty pattern clears the member's
        let before = g.epoch;
        g.heartbeat(now, SESSION, by_regex("b", b.epoch, Some("")), &cluster);
        assert_eq!(g.members["b"].regex, None);
        assert_eq!(g.members["b"].topics, ["audit".to_string()].into());
        assert_eq!(g.epoch, before + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalid_regex_is_refused_as_kafka_refuses_it() {
        let cluster = Cluster([("t".into(), 1)].into(), 1);
        let mut g = ConsumerGroup::default();
        for bad in ["orders(", "a)|(b", "[z-a]"] {
            let r = g.heartbeat(
                Instant::now(),
                SESSION,
                by_regex("a", 0, Some(bad)),
                &cluster,
            );
            let (e, msg) = r.error.expect("refused");
            assert_eq!(e, ResponseError::InvalidRegularExpression);
            assert!(
                msg.starts_with(&format!(
                    "SubscribedTopicRegex `{bad}` is not a valid regular expression: "
                )),
                "{msg}"
            );
            assert!(g.members.is_empty(), "the member did not join");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_restored_group_keeps_its_resolved_regexes() {
        let now = Instant::now();
        let cluster = Cluster([("t1".into(), 2), ("t2".into(), 2)].into(), 7);
        let mut g = ConsumerGroup::default();
        let mut store = Default::default();
        let a = g.heartbeat(now, SESSION, by_regex("a", 0, Some("t.")), &cluster);
        let a = g.heartbeat(now, SESSION, by_regex("a", a.epoch, None), &cluster);
        apply(&mut store, g.take_changes());
        assert_eq!(a.assignment.as_ref().unwrap().len(), 4);
        assert_eq!(store.0.as_ref().unwrap().resolved["t."].len(), 2);

        let members: Vec<(String, MemberRecord)> = store.1.clone().into_iter().collect();
        let mut r = ConsumerGroup::restore(store.0.clone(), members, now, SESSION);
        assert_eq!(r.members["a"].regex.as_deref(), Some("t."));
        // a new coordinator resolves again (another version of the topics) to the same
        // topics: no rebalance
        let cluster = Cluster(cluster.0, 1);
        let a2 = r.heartbeat(now, SESSION, by_regex("a", a.epoch, None), &cluster);
        assert_eq!((a2.error, a2.epoch, r.epoch), (None, a.epoch, g.epoch));
        assert_eq!(r.take_changes(), vec![]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pattern_brought_back_is_resolved_again_after_the_named_topics() {
        // librdkafka's 0045 resubscribe_with_regex: names come in the first answer, the
        // pattern's matches in a later one, also when the pattern was used before.
        let now = Instant::now();
        let cluster = Cluster(
            [("r1".into(), 2), ("r2".into(), 2), ("a".into(), 1)].into(),
            1,
        );
        let mut g = ConsumerGroup::default();
        let m = g.heartbeat(now, SESSION, by_regex("m", 0, Some("r.")), &cluster);
        let m = g.heartbeat(now, SESSION, by_regex("m", m.epoch, None), &cluster);
        assert_eq!(m.assignment.unwrap().len(), 4);
        g.heartbeat(now, SESSION, by_regex("m", -1, None), &cluster);
        assert!(g.resolved.is_empty(), "the last member using it left");

        let both = Heartbeat {
            subscribed: Some(vec!["a".into()]),
            ..by_regex("m", 0, Some("r."))
        };
        let m = g.heartbeat(now, SESSION, both, &cluster);
        assert_eq!(
            topics_of(m.assignment.as_ref().unwrap()),
            ["a".to_string()].into()
        );
        let m = g.heartbeat(now, SESSION, by_regex("m", m.epoch, None), &cluster);
        assert_eq!(m.assignment.unwrap().len(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_static_member_is_replaced_only_once_it_left() {
        // librdkafka's 0102 (KIP-848 variant) and Kafka's static membership rules
        let now = Instant::now();
        let stat = |member: &str, epoch: i32| Heartbeat {
            instance_id: Some("i".into()),
            ..hb(member, epoch, None)
        };
        let mut g = ConsumerGroup::default();
        let a = g.heartbeat(now, SESSION, stat("a1", 0), &parts);
        let b = g.heartbeat(now, SESSION, hb("b", 0, None), &parts);
        let a = g.heartbeat(now, SESSION, stat("a1", a.epoch), &parts);
        let owned = g.members["a1"].assigned.clone();
        assert_eq!(owned.len() + g.target["b"].len(), 4);
        let epoch = g.epoch;
        assert!(!g.take_changes().is_empty());

        // a second process with the same instance id while the first is in the group
        let a2 = g.heartbeat(now, SESSION, stat("a2", 0), &parts);
        assert_eq!(a2.error.unwrap().0, ResponseError::UnreleasedInstanceId);
        assert!(!g.members.contains_key("a2"));
        assert_eq!(g.epoch, epoch);

        // the first leaves for a restart: it keeps its partitions, no rebalance
        let left = g.heartbeat(now, SESSION, stat("a1", STATIC_LEFT), &parts);
        assert_eq!((left.error, left.epoch), (None, STATIC_LEFT));
        assert_eq!(g.epoch, epoch);
        let b2 = g.heartbeat(now, SESSION, hb("b", b.epoch, None), &parts);
        assert!(b2.assignment.is_none_or(|got| got.is_disjoint(&owned)));

        // its next incarnation takes over what it owned, still without a rebalance
        let a2 = g.heartbeat(now, SESSION, stat("a2", 0), &parts);
        assert_eq!(a2.error, None);
        assert_eq!(a2.assignment.unwrap(), owned);
        assert_eq!(g.epoch, epoch);
        assert!(!g.members.contains_key("a1"));
        let changes = g.take_changes();
        assert!(changes.contains(&Change::Member("a1".into(), None)));

        // the old process is fenced
        let old = g.heartbeat(now, SESSION, stat("a1", a.epoch), &parts);
        assert_eq!(old.error.unwrap().0, ResponseError::FencedInstanceId);
    }

    #[tokio::test(start_paused = true)]
    async fn a_static_member_that_left_expires_with_its_session() {
        let t0 = Instant::now();
        let mut g = ConsumerGroup::default();
        let stat = Heartbeat {
            instance_id: Some("i".into()),
            ..hb("a", 0, None)
        };
        g.heartbeat(t0, SESSION, stat.clone(), &parts);
        g.heartbeat(
            t0,
            SESSION,
            Heartbeat {
                epoch: STATIC_LEFT,
                ..stat
            },
            &parts,
        );
        assert!(!g.is_empty());
        tokio::time::advance(SESSION).await;
        g.tick(Instant::now());
        assert!(g.is_empty());
    }
}
