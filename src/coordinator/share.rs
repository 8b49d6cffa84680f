//! The membership of one share group (KIP-932, ShareGroupHeartbeat) as a pure state machine.
//!
//! Share groups have no revocation: a partition may be assigned to several members at once,
//! since the share partition hands each record to one member only (`share::partition`). So
//! a member's epoch simply becomes the group epoch on its next heartbeat, and it is sent its
//! whole assignment whenever that changed.
//!
//! The assignment, per subscribed topic, over the members subscribing to it (in member-id
//! order): with at least as many partitions as members, partition `p` goes to member
//! `p mod members`; with more members than partitions, member `i` gets partition
//! `i mod partitions`, so every partition is shared by as equal a number of members as can be.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::ResponseError;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::consumer::Tp;

/// What a share group needs to know of the cluster's topics.
pub trait ShareTopics {
    /// A topic's partition count (None: no such topic).
    fn partitions(&self, topic: &str) -> Option<i32>;
}

#[cfg(test)]
impl<F: Fn(&str) -> Option<i32>> ShareTopics for F {
    fn partitions(&self, topic: &str) -> Option<i32> {
        self(topic)
    }
}

/// `group.share.max.size`: members a share group takes.
pub const MAX_MEMBERS: usize = 200;

/// Kafka's limit on a client-made member id (a UUID's length).
const MEMBER_ID_MAX_CHARS: usize = 36;

#[derive(Debug, Clone)]
pub struct ShareMember {
    pub id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub subscribed: Vec<String>,
    pub assigned: BTreeSet<Tp>,
    last_sent: Option<BTreeSet<Tp>>,
    deadline: Instant,
}

/// A ShareGroupHeartbeat, decoded.
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeat {
    pub member_id: String,
    pub epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Option<Vec<String>>,
    /// The group's `share.session.timeout.ms`, when it sets one (else the broker's).
    pub session_timeout: Option<Duration>,
}

impl ShareHeartbeat {
    /// The request-shape checks Kafka makes first: the INVALID_REQUEST message, if any.
    pub fn invalid(&self) -> Option<&'static str> {
        if self.member_id.is_empty() {
            return Some("MemberId can't be empty.");
        }
        if self.member_id.chars().count() > MEMBER_ID_MAX_CHARS {
            return Some("MemberId can't be longer than 36 characters.");
        }
        if self.epoch < -1 {
            return Some("MemberEpoch is invalid.");
        }
        if self.epoch == 0 && self.subscribed.as_ref().is_none_or(|s| s.is_empty()) {
            return Some("SubscribedTopicNames must be set in first request.");
        }
        None
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ShareHeartbeatResult {
    pub error: Option<(ResponseError, String)>,
    pub member_id: String,
    pub epoch: i32,
    /// Present when it changed (or on joining): the member's whole assignment.
    pub assignment: Option<BTreeSet<Tp>>,
}

impl ShareHeartbeatResult {
    fn error(e: ResponseError, msg: impl Into<String>, member_id: &str) -> ShareHeartbeatResult {
        ShareHeartbeatResult {
            error: Some((e, msg.into())),
            member_id: member_id.to_string(),
            epoch: -1,
            assignment: None,
        }
    }
}

/// What is persisted of a share group (in `__consumer_offsets`): its epoch, the topics its
/// members subscribed to, and its members with their epochs and subscriptions, so they
/// carry on under a new coordinator (their assignment is computed again; session deadlines
/// start afresh).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareGroupRecord {
    pub epoch: i32,
    pub topics: Vec<String>,
    #[serde(default)]
    pub members: Vec<ShareMemberRecord>,
    /// The partition counts the assignment was computed from.
    #[serde(default)]
    pub counts: BTreeMap<String, i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareMemberRecord {
    pub id: String,
    pub epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
}

#[derive(Debug, Default)]
pub struct ShareGroup {
    pub epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    /// Partition counts of the subscribed topics the assignment was computed from.
    topics_seen: BTreeMap<String, i32>,
    /// Members expired since the assignment was computed: the next heartbeat recomputes it.
    stale: bool,
    /// Every topic a member subscribed to while this group existed: where it may have
    /// share partitions (DescribeShareGroupOffsets).
    pub topics_ever: BTreeSet<String>,
}

impl ShareGroup {
    pub fn record(&self) -> ShareGroupRecord {
        ShareGroupRecord {
            epoch: self.epoch,
            topics: self.topics_ever.iter().cloned().collect(),
            members: self
                .members
                .values()
                .map(|m| ShareMemberRecord {
                    id: m.id.clone(),
                    epoch: m.epoch,
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed: m.subscribed.clone(),
                })
                .collect(),
            counts: self.topics_seen.clone(),
        }
    }

    /// A share group as persisted: its members' sessions run from `now`, and the next
    /// heartbeat computes the assignment again and sends each member its own.
    pub fn restore(r: ShareGroupRecord, now: Instant, session_timeout: Duration) -> ShareGroup {
        let members = r
            .members
            .into_iter()
            .map(|m| {
                let member = ShareMember {
                    id: m.id.clone(),
                    rack_id: m.rack_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    epoch: m.epoch,
                    subscribed: m.subscribed,
                    assigned: BTreeSet::new(),
                    last_sent: None,
                    deadline: now + session_timeout,
                };
                (m.id, member)
            })
            .collect();
        ShareGroup {
            epoch: r.epoch,
            members,
            topics_ever: r.topics.into_iter().collect(),
            topics_seen: r.counts,
            stale: true,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Kafka's names: Empty, Stable.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// Every topic partition some member is assigned.
    pub fn assigned(&self) -> BTreeSet<Tp> {
        self.members
            .values()
            .flat_map(|m| m.assigned.iter().cloned())
            .collect()
    }

    pub fn heartbeat(
        &mut self,
        now: Instant,
        session_timeout: Duration,
        h: ShareHeartbeat,
        topics: &dyn ShareTopics,
    ) -> ShareHeartbeatResult {
        match h.epoch {
            -1 => {
                if self.members.remove(&h.member_id).is_some() {
                    self.epoch += 1;
                    self.assign(topics);
                }
                return ShareHeartbeatResult {
                    error: None,
                    member_id: h.member_id,
                    epoch: -1,
                    assignment: None,
                };
            }
            0 => {
                if !self.members.contains_key(&h.member_id) && self.members.len() >= MAX_MEMBERS {
                    return ShareHeartbeatResult::error(
                        ResponseError::GroupMaxSizeReached,
                        format!("The share group has reached its maximum capacity of {MAX_MEMBERS} members."),
                        &h.member_id,
                    );
                }
                // A member that joins again (epoch 0) starts afresh under its id.
                self.members.insert(
                    h.member_id.clone(),
                    ShareMember {
                        id: h.member_id.clone(),
                        rack_id: h.rack_id.clone(),
                        client_id: h.client_id.clone(),
                        client_host: h.client_host.clone(),
                        epoch: 0,
                        subscribed: Vec::new(),
                        assigned: BTreeSet::new(),
                        last_sent: None,
                        deadline: now + session_timeout,
                    },
                );
                self.epoch += 1;
            }
            e => {
                let Some(m) = self.members.get(&h.member_id) else {
                    return ShareHeartbeatResult::error(
                        ResponseError::UnknownMemberId,
                        format!("Member {} is not a member of the share group.", h.member_id),
                        &h.member_id,
                    );
                };
                if e != m.epoch {
                    return ShareHeartbeatResult::error(
                        ResponseError::FencedMemberEpoch,
                        format!(
                            "The share group member has a smaller member epoch ({e}) than the one known by the group coordinator ({}).",
                            m.epoch
                        ),
                        &h.member_id,
                    );
                }
            }
        }
        let m = self.members.get_mut(&h.member_id).expect("member present");
        m.deadline = now + session_timeout;
        if let Some(r) = h.rack_id {
            m.rack_id = Some(r);
        }
        let mut changed = h.epoch == 0;
        if let Some(mut s) = h.subscribed {
            s.sort();
            s.dedup();
            if s != m.subscribed {
                self.topics_ever.extend(s.iter().cloned());
                m.subscribed = s;
                if h.epoch != 0 {
                    self.epoch += 1;
                }
                changed = true;
            }
        }
        // New partition counts (or a subscribed topic created or deleted) move the epoch too.
        if self.counts(topics) != self.topics_seen {
            if !changed {
                self.epoch += 1;
            }
            changed = true;
        }
        if changed || self.stale {
            self.assign(topics);
        }
        let epoch = self.epoch;
        let m = self.members.get_mut(&h.member_id).expect("member present");
        m.epoch = epoch;
        let assignment = (m.last_sent.as_ref() != Some(&m.assigned)).then(|| m.assigned.clone());
        if assignment.is_some() {
            m.last_sent = assignment.clone();
        }
        ShareHeartbeatResult {
            error: None,
            member_id: h.member_id,
            epoch,
            assignment,
        }
    }

    fn counts(&self, topics: &dyn ShareTopics) -> BTreeMap<String, i32> {
        self.members
            .values()
            .flat_map(|m| m.subscribed.iter())
            .filter_map(|t| Some((t.clone(), topics.partitions(t)?)))
            .collect()
    }

    fn assign(&mut self, topics: &dyn ShareTopics) {
        self.stale = false;
        self.topics_seen = self.counts(topics);
        for m in self.members.values_mut() {
            m.assigned.clear();
        }
        for (topic, &partitions) in &self.topics_seen {
            let subs: Vec<String> = self
                .members
                .values()
                .filter(|m| m.subscribed.contains(topic))
                .map(|m| m.id.clone())
                .collect();
            if subs.is_empty() || partitions <= 0 {
                continue;
            }
            let n = subs.len() as i32;
            if n <= partitions {
                for p in 0..partitions {
                    let m = self.members.get_mut(&subs[(p % n) as usize]).expect("sub");
                    m.assigned.insert((topic.clone(), p));
                }
            } else {
                for (i, id) in subs.iter().enumerate() {
                    let m = self.members.get_mut(id).expect("sub");
                    m.assigned.insert((topic.clone(), i as i32 % partitions));
                }
            }
        }
    }

    /// Removes the members whose session ended by `now`; returns their ids. The others are
    /// given their partitions on their next heartbeat.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.deadline <= now)
            .map(|m| m.id.clone())
            .collect();
        if !gone.is_empty() {
            for id in &gone {
                self.members.remove(id);
            }
            self.epoch += 1;
            self.stale = true;
        }
        gone
    }

    /// The earliest session deadline, if any member is left.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.members.values().map(|m| m.deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: Duration = Duration::from_secs(45);

    fn hb(id: &str, epoch: i32, topics: Option<&[&str]>) -> ShareHeartbeat {
        ShareHeartbeat {
            member_id: id.into(),
            epoch,
            session_timeout: None,
            subscribed: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    fn tps(list: &[(&str, i32)]) -> BTreeSet<Tp> {
        list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
    }

    fn two(t: &str) -> Option<i32> {
        (t == "t").then_some(2)
    }

    #[test]
    fn members_split_the_partitions_then_share_them() {
        let now = Instant::now();
        let mut g = ShareGroup::default();
        let a = g.heartbeat(now, SESSION, hb("a", 0, Some(&["t"])), &two);
        assert_eq!(a.epoch, 1);
        assert_eq!(a.assignment, Some(tps(&[("t", 0), ("t", 1)])));
        let b = g.heartbeat(now, SESSION, hb("b", 0, Some(&["t"])), &two);
        assert_eq!((b.epoch, b.assignment), (2, Some(tps(&[("t", 1)]))));
        // a learns of its smaller share on its next heartbeat, at the new epoch.
        let a = g.heartbeat(now, SESSION, hb("a", 1, None), &two);
        assert_eq!((a.epoch, a.assignment), (2, Some(tps(&[("t", 0)]))));
        // Unchanged: no assignment in the answer.
        let a = g.heartbeat(now, SESSION, hb("a", 2, None), &two);
        assert_eq!(a.assignment, None);
        // A third member shares a partition with one of the others.
        let c = g.heartbeat(now, SESSION, hb("c", 0, Some(&["t"])), &two);
        assert_eq!(c.assignment, Some(tps(&[("t", 0)])));
        assert_eq!(g.assigned(), tps(&[("t", 0), ("t", 1)]));
        assert_eq!(g.members["a"].assigned, tps(&[("t", 0)]));
        assert_eq!(g.members["b"].assigned, tps(&[("t", 1)]));
    }

    #[test]
    fn stale_and_unknown_members_are_refused() {
        let now = Instant::now();
        let mut g = ShareGroup::default();
        g.heartbeat(now, SESSION, hb("a", 0, Some(&["t"])), &two);
        g.heartbeat(now, SESSION, hb("b", 0, Some(&["t"])), &two);
        let r = g.heartbeat(now, SESSION, hb("a", 7, None), &two);
        assert_eq!(r.error.unwrap().0, ResponseError::FencedMemberEpoch);
        let r = g.heartbeat(now, SESSION, hb("x", 1, None), &two);
        assert_eq!(r.error.unwrap().0, ResponseError::UnknownMemberId);
        assert!(hb("a", 0, None).invalid().is_some());
        assert!(hb("", 1, None).invalid().is_some());
        assert!(hb(&"x".repeat(37), 1, None).invalid().is_some());
        assert!(hb("a", 1, None).invalid().is_none());
    }

    #[test]
    fn leaving_and_expiring_give_the_partitions_to_the_rest() {
        let t0 = Instant::now();
        let mut g = ShareGroup::default();
        g.heartbeat(t0, SESSION, hb("a", 0, Some(&["t"])), &two);
        g.heartbeat(t0, SESSION, hb("b", 0, Some(&["t"])), &two);
        g.heartbeat(t0, SESSION, hb("c", 0, Some(&["t"])), &two);
        let left = g.heartbeat(t0, SESSION, hb("c", -1, None), &two);
        assert_eq!((left.epoch, left.error), (-1, None));
        let t1 = t0 + Duration::from_secs(30);
        let e = g.heartbeat(t1, SESSION, hb("a", 1, None), &two).epoch;
        assert_eq!(g.expire(t0 + SESSION), vec!["b".to_string()]);
        let a = g.heartbeat(t1, SESSION, hb("a", e, None), &two);
        assert_eq!(a.assignment, Some(tps(&[("t", 0), ("t", 1)])));
        assert_eq!(g.expire(t1 + SESSION), vec!["a".to_string()]);
        assert!(g.is_empty());
        assert_eq!(g.state_name(), "Empty");
    }

    #[test]
    fn new_partitions_and_new_topics_are_assigned() {
        let now = Instant::now();
        let mut g = ShareGroup::default();
        let a = g.heartbeat(now, SESSION, hb("a", 0, Some(&["t", "u"])), &two);
        assert_eq!(a.assignment, Some(tps(&[("t", 0), ("t", 1)])));
        let more = |t: &str| match t {
            "t" => Some(3),
            "u" => Some(1),
            _ => None,
        };
        let a = g.heartbeat(now, SESSION, hb("a", a.epoch, None), &more);
        assert_eq!(a.epoch, 2);
        assert_eq!(
            a.assignment,
            Some(tps(&[("t", 0), ("t", 1), ("t", 2), ("u", 0)]))
        );
    }
}
