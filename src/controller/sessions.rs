//! Broker liveness on the active controller: BrokerHeartbeat handling and fencing after
//! `broker.session.timeout.ms` without one. Sessions live only in the active controller's
//! memory (as in KRaft); what they decide is written to the log as records. Pure: the caller
//! passes the clock and commits the records.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::ResponseError;
use tokio::time::Instant;

use super::metadata::{Image, Record};

/// A BrokerHeartbeat request's fields.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub broker: i32,
    pub broker_epoch: i64,
    /// The metadata offset the broker has applied.
    pub metadata_offset: i64,
    pub want_fence: bool,
    pub want_shut_down: bool,
}

/// A BrokerHeartbeat response's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub error: Option<ResponseError>,
    pub is_caught_up: bool,
    pub is_fenced: bool,
    /// Controlled shutdown is done: the broker leads nothing any more.
    pub should_shut_down: bool,
}

pub struct Sessions {
    timeout: Duration,
    /// Broker id -> when its session ends without another heartbeat.
    deadlines: BTreeMap<i32, Instant>,
}

impl Sessions {
    pub fn new(timeout: Duration) -> Sessions {
        Sessions {
            timeout,
            deadlines: BTreeMap::new(),
        }
    }

    /// A (re-)registration starts a session.
    pub fn registered(&mut self, broker: i32, now: Instant) {
        self.deadlines.insert(broker, now + self.timeout);
    }

    /// A new active controller gives every known broker a full session, as KRaft does, so a
    /// failover does not fence brokers whose heartbeats went to the old controller.
    pub fn took_over(&mut self, image: &Image, now: Instant) {
        self.deadlines = image
            .brokers
            .keys()
            .map(|id| (*id, now + self.timeout))
            .collect();
    }

    /// Handles one heartbeat: the answer, and the records to commit (unfence when caught up,
    /// fence when asked, leadership moves for a controlled shutdown).
    pub fn heartbeat(
        &mut self,
        image: &Image,
        hb: &Heartbeat,
        now: Instant,
    ) -> (HeartbeatAnswer, Vec<Record>) {
        let refuse = |error| {
            (
                HeartbeatAnswer {
                    error: Some(error),
                    is_caught_up: false,
                    is_fenced: true,
                    should_shut_down: false,
                },
                Vec::new(),
            )
        };
        let Some(b) = image.brokers.get(&hb.broker) else {
            return refuse(ResponseError::BrokerIdNotRegistered);
        };
        if b.epoch != hb.broker_epoch {
            return refuse(ResponseError::StaleBrokerEpoch);
        }
        self.deadlines.insert(hb.broker, now + self.timeout);
        // Caught up once it has applied its own registration (Kafka's rule).
        let caught_up = hb.metadata_offset >= b.epoch;
        let mut records = Vec::new();
        if hb.want_fence {
            records.extend(image.fence_broker(hb.broker));
        } else if b.fenced && caught_up && !hb.want_shut_down {
            records.extend(image.unfence_broker(hb.broker));
        }
        if hb.want_shut_down {
            records.extend(image.shut_down_broker(hb.broker));
        }
        let leads_nothing = image
            .topics
            .values()
            .flat_map(|t| &t.partitions)
            .all(|p| p.leader != hb.broker);
        let will_be_fenced = records
            .iter()
            .any(|r| matches!(r, Record::FenceBroker { .. }));
        let should_shut_down = hb.want_shut_down && b.shutting_down && leads_nothing;
        if should_shut_down && !b.fenced {
            // As in KRaft: a finished controlled shutdown fences the broker, so it leaves the
            // ISRs now and its next incarnation can register at once.
            records.extend(image.fence_broker(hb.broker));
        }
        let will_be_fenced = will_be_fenced
            || records
                .iter()
                .any(|r| matches!(r, Record::FenceBroker { .. }));
        let will_be_unfenced = records
            .iter()
            .any(|r| matches!(r, Record::UnfenceBroker { .. }));
        (
            HeartbeatAnswer {
                error: None,
                is_caught_up: caught_up,
                is_fenced: (b.fenced && !will_be_unfenced) || will_be_fenced,
                should_shut_down,
            },
            records,
        )
    }

    /// Fences every unfenced broker whose session ended (its leaderships move, it leaves
    /// ISRs); returns the records to commit.
    pub fn expire(&mut self, image: &Image, now: Instant) -> Vec<Record> {
        let mut expired = Vec::new();
        for (id, b) in &image.brokers {
            if b.fenced {
                continue;
            }
            let deadline = *self.deadlines.entry(*id).or_insert(now + self.timeout);
            if deadline <= now {
                tracing::info!(broker = id, "broker session expired: fencing it");
                expired.push(*id);
            }
        }
        let mut out = image.in_sequence(
            expired
                .into_iter()
                .map(|id| move |img: &Image| img.fence_broker(id)),
        );
        if out.is_empty() {
            out = image.repair();
        }
        out
    }

    /// When [`Sessions::expire`] next has something to do.
    pub fn next_deadline(&self, image: &Image) -> Option<Instant> {
        image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| self.deadlines.get(&b.id).copied())
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::metadata::NO_LEADER;
    use uuid::Uuid;

    struct Cluster {
        image: Image,
        offset: i64,
        sessions: Sessions,
    }

    impl Cluster {
        fn commit(&mut self, rs: Vec<Record>) {
            for r in rs {
                self.offset += 1;
                self.image.apply(self.offset, &r);
            }
        }

        fn register(&mut self, id: i32) -> i64 {
            let rs = self
                .image
                .register_broker(id, Uuid::new_v4(), Vec::new(), None)
                .unwrap();
            self.commit(rs);
            self.sessions.registered(id, Instant::now());
            self.image.brokers[&id].epoch
        }

        fn beat(&mut self, id: i32, f: impl FnOnce(&mut Heartbeat)) -> HeartbeatAnswer {
            let mut hb = Heartbeat {
                broker: id,
                broker_epoch: self.image.brokers.get(&id).map_or(-1, |b| b.epoch),
                metadata_offset: self.offset,
                want_fence: false,
                want_shut_down: false,
            };
            f(&mut hb);
            let (answer, rs) = self.sessions.heartbeat(&self.image, &hb, Instant::now());
            self.commit(rs);
            answer
        }
    }

    fn cluster() -> Cluster {
        let mut c = Cluster {
            image: Image::new(),
            offset: -1,
            sessions: Sessions::new(Duration::from_secs(9)),
        };
        for id in 1..=3 {
            c.register(id);
            let a = c.beat(id, |_| {});
            assert!(a.is_caught_up);
        }
        c
    }

    #[tokio::test(start_paused = true)]
    async fn brokers_are_unfenced_once_caught_up() {
        let mut c = Cluster {
            image: Image::new(),
            offset: -1,
            sessions: Sessions::new(Duration::from_secs(9)),
        };
        let epoch = c.register(1);
        let behind = c.beat(1, |h| h.metadata_offset = epoch - 1);
        assert!(!behind.is_caught_up && behind.is_fenced);
        assert!(c.image.brokers[&1].fenced);
        let a = c.beat(1, |_| {});
        assert!(a.is_caught_up && !a.is_fenced);
        assert!(!c.image.brokers[&1].fenced);
    }

    #[tokio::test(start_paused = true)]
    async fn silence_past_the_session_timeout_fences_and_moves_leadership() {
        let mut c = cluster();
        let t = Uuid::new_v4();
        let rs = c
            .image
            .create_topic("t", t, 3, 3, Default::default(), 0)
            .unwrap();
        c.commit(rs);
        tokio::time::advance(Duration::from_secs(5)).await;
        for id in [2, 3] {
            c.beat(id, |_| {});
        }
        assert!(c.sessions.expire(&c.image, Instant::now()).is_empty());
        assert_eq!(
            c.sessions.next_deadline(&c.image),
            Some(Instant::now() + Duration::from_secs(4)),
            "broker 1's session ends first"
        );
        tokio::time::advance(Duration::from_secs(4)).await;
        let rs = c.sessions.expire(&c.image, Instant::now());
        c.commit(rs);
        assert!(c.image.brokers[&1].fenced);
        assert!(!c.image.brokers[&2].fenced && !c.image.brokers[&3].fenced);
        for p in &c.image.topics[&t].partitions {
            assert_ne!(p.leader, 1);
            assert!(!p.isr.contains(&1));
        }
        // Broker 1 comes back: a new registration (new epoch), then heartbeats.
        let old = c.image.brokers[&1].epoch;
        assert_eq!(
            c.beat(1, |h| h.broker_epoch = old - 1).error,
            Some(ResponseError::StaleBrokerEpoch)
        );
        let new = c.register(1);
        assert!(new > old);
        assert!(!c.beat(1, |_| {}).is_fenced);
    }

    #[tokio::test(start_paused = true)]
    async fn brokers_expiring_together_each_give_up_what_they_held() {
        let mut c = cluster();
        let t = Uuid::new_v4();
        let rs = c
            .image
            .create_topic("t", t, 3, 3, Default::default(), 0)
            .unwrap();
        c.commit(rs);
        tokio::time::advance(Duration::from_secs(5)).await;
        c.beat(3, |_| {});
        tokio::time::advance(Duration::from_secs(5)).await;
        // Brokers 1 and 2 expire in the same check: every change must still apply.
        let rs = c.sessions.expire(&c.image, Instant::now());
        c.commit(rs);
        for p in &c.image.topics[&t].partitions {
            assert_eq!((p.leader, p.isr.clone()), (3, vec![3]), "{p:?}");
        }
        // All three at once: nobody is left to lead; the ISR keeps its last member.
        tokio::time::advance(Duration::from_secs(10)).await;
        let rs = c.sessions.expire(&c.image, Instant::now());
        c.commit(rs);
        for p in &c.image.topics[&t].partitions {
            assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![3]), "{p:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fenced_leader_left_behind_is_moved_by_the_next_check() {
        let mut c = cluster();
        let t = Uuid::new_v4();
        let rs = c
            .image
            .create_topic("t", t, 1, 3, Default::default(), 0)
            .unwrap();
        c.commit(rs);
        let leader = c.image.topics[&t].partitions[0].leader;
        // A fence whose partition change lost a compare-and-set: only the broker record lands.
        let epoch = c.image.brokers[&leader].epoch;
        c.commit(vec![Record::FenceBroker { id: leader, epoch }]);
        assert_eq!(c.image.topics[&t].partitions[0].leader, leader);
        let rs = c.sessions.expire(&c.image, Instant::now());
        c.commit(rs);
        let p = &c.image.topics[&t].partitions[0];
        assert_ne!(p.leader, leader);
        assert!(p.leader > 0 && !p.isr.contains(&leader));
    }

    #[tokio::test(start_paused = true)]
    async fn controlled_shutdown_finishes_when_leadership_has_moved() {
        let mut c = cluster();
        let rs = c
            .image
            .create_topic("t", Uuid::new_v4(), 3, 3, Default::default(), 0)
            .unwrap();
        c.commit(rs);
        let first = c.beat(1, |h| h.want_shut_down = true);
        assert!(
            !first.should_shut_down,
            "it still led partitions when it asked"
        );
        assert!(c
            .image
            .topics
            .values()
            .flat_map(|t| &t.partitions)
            .all(|p| p.leader != 1 && p.isr.contains(&1)));
        let second = c.beat(1, |h| h.want_shut_down = true);
        assert!(second.should_shut_down && second.is_fenced);
        // Done: fenced, out of every ISR, and a new incarnation may register at once.
        assert!(c.image.brokers[&1].fenced);
        assert!(c
            .image
            .topics
            .values()
            .flat_map(|t| &t.partitions)
            .all(|p| p.leader != 1 && !p.isr.contains(&1)));
        assert!(c
            .image
            .register_broker(1, Uuid::new_v4(), Vec::new(), None)
            .is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_brokers_and_a_new_controller() {
        let mut c = cluster();
        assert_eq!(
            c.beat(9, |_| {}).error,
            Some(ResponseError::BrokerIdNotRegistered)
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        // A controller taking over does not fence brokers it never heard from.
        let mut fresh = Sessions::new(Duration::from_secs(9));
        fresh.took_over(&c.image, Instant::now());
        assert!(fresh.expire(&c.image, Instant::now()).is_empty());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(
            fresh
                .expire(&c.image, Instant::now())
                .iter()
                .filter(|r| matches!(r, Record::FenceBroker { .. }))
                .count(),
            3
        );
    }
}
