//! The committed offsets of one group as a pure state machine, kept apart from the group's
//! membership: classic groups ([`super::group`]), KIP-848 groups ([`super::consumer`]) and
//! committers outside any group (an assign()-only consumer, the admin client) keep their
//! offsets here alike. The membership state machines only decide who may commit.
//!
//! OffsetCommit, OffsetDelete, retention and DeleteGroups change the map and leave
//! [`OffsetChange`]s for the coordinator to write. Nothing here does I/O or reads a clock.
//!
//! Transactional offset commits (TxnOffsetCommit) go here next: held as pending per
//! producer until their transaction ends, then made committed or dropped.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_ms: i64,
}

/// An offset to write (`Some`) or delete (`None`).
#[derive(Debug, Clone, PartialEq)]
pub struct OffsetChange {
    pub topic: String,
    pub partition: i32,
    pub value: Option<Committed>,
}

pub struct GroupOffsets {
    /// When these offsets came into memory (first committed, or loaded). A group with no
    /// classic state machine has had no member since, so its offsets expire counting from
    /// here.
    pub since: Instant,
    committed: BTreeMap<(String, i32), Committed>,
    changes: Vec<OffsetChange>,
}

impl GroupOffsets {
    pub fn new(since: Instant) -> GroupOffsets {
        GroupOffsets {
            since,
            committed: BTreeMap::new(),
            changes: Vec::new(),
        }
    }

    /// Puts back an offset read from the store (nothing to write).
    pub fn restore(&mut self, topic: String, partition: i32, c: Committed) {
        self.committed.insert((topic, partition), c);
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<&Committed> {
        self.committed.get(&(topic.to_string(), partition))
    }

    /// Every committed offset, by topic and partition.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i32, &Committed)> {
        self.committed.iter().map(|((t, p), c)| (t.as_str(), *p, c))
    }

    pub fn is_empty(&self) -> bool {
        self.committed.is_empty()
    }

    /// Changes to write produced by the last events.
    pub fn take_changes(&mut self) -> Vec<OffsetChange> {
        std::mem::take(&mut self.changes)
    }

    pub fn commit(&mut self, topic: &str, partition: i32, c: Committed) {
        self.changes.push(OffsetChange {
            topic: topic.to_string(),
            partition,
            value: Some(c.clone()),
        });
        self.committed.insert((topic.to_string(), partition), c);
    }

    pub fn delete(&mut self, topic: &str, partition: i32) -> bool {
        let removed = self
            .committed
            .remove(&(topic.to_string(), partition))
            .is_some();
        if removed {
            self.changes.push(OffsetChange {
                topic: topic.to_string(),
                partition,
                value: None,
            });
        }
        removed
    }

    /// Deletes every offset (DeleteGroups, or a classic group that died).
    pub fn delete_all(&mut self) {
        let keys: Vec<(String, i32)> = self.committed.keys().cloned().collect();
        for (t, p) in keys {
            self.delete(&t, p);
        }
    }

    /// Removes offsets older than `retention` once the group has been empty that long
    /// (Kafka counts from the later of the commit and the group becoming empty).
    /// `empty_since` is when the group last became empty; `None` while it has members.
    pub fn expire(
        &mut self,
        now: Instant,
        now_ms: i64,
        retention: Duration,
        empty_since: Option<Instant>,
    ) {
        let Some(empty_since) = empty_since else {
            return;
        };
        if now.duration_since(empty_since) < retention {
            return;
        }
        let cutoff = now_ms - retention.as_millis() as i64;
        let old: Vec<(String, i32)> = self
            .committed
            .iter()
            .filter(|(_, c)| c.commit_ms < cutoff)
            .map(|(k, _)| k.clone())
            .collect();
        for (topic, partition) in old {
            self.delete(&topic, partition);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(commit_ms: i64) -> Committed {
        Committed {
            offset: 5,
            leader_epoch: -1,
            metadata: None,
            commit_ms,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn offsets_of_empty_groups_expire_after_retention() {
        let t0 = Instant::now();
        let mut o = GroupOffsets::new(t0);
        o.commit("t", 0, c(1_000));
        o.commit("t", 1, c(90_000));
        o.take_changes();
        tokio::time::advance(Duration::from_secs(60)).await;
        let retention = Duration::from_secs(60);
        o.expire(Instant::now(), 100_000, retention, None);
        assert_eq!(
            o.iter().count(),
            2,
            "a group with members keeps its offsets"
        );
        o.expire(Instant::now(), 100_000, retention, Some(t0 + retention / 2));
        assert_eq!(o.iter().count(), 2, "not empty for the whole retention yet");
        o.expire(Instant::now(), 100_000, retention, Some(t0));
        assert_eq!(
            o.iter().map(|(t, p, _)| (t, p)).collect::<Vec<_>>(),
            vec![("t", 1)],
            "only the old commit goes"
        );
        assert_eq!(
            o.take_changes(),
            vec![OffsetChange {
                topic: "t".into(),
                partition: 0,
                value: None
            }]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn commits_and_deletes_say_what_to_write() {
        let mut o = GroupOffsets::new(Instant::now());
        o.restore("t".into(), 0, c(1));
        assert!(
            o.take_changes().is_empty(),
            "a restored offset is written already"
        );
        o.commit("t", 1, c(2));
        assert!(!o.delete("t", 9), "nothing to delete");
        assert!(o.delete("t", 0));
        assert_eq!(o.get("t", 1), Some(&c(2)));
        assert_eq!(
            o.take_changes(),
            vec![
                OffsetChange {
                    topic: "t".into(),
                    partition: 1,
                    value: Some(c(2))
                },
                OffsetChange {
                    topic: "t".into(),
                    partition: 0,
                    value: None
                },
            ]
        );
        o.delete_all();
        assert!(o.is_empty());
        assert_eq!(o.take_changes().len(), 1);
    }
}
