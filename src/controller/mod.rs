//! The cluster controller: the metadata quorum.
//!
//! - [`metadata`]: the metadata state machine (records, the image they build, and the
//!   controller's decisions), pure and unit-tested.
//! - [`raft`]: openraft storage: the Raft log and vote in their own RocksDB, synced; the state
//!   machine applying committed records to the image and publishing it in log order.
//! - [`network`]: Raft RPCs between voters over TCP (the controller listener).
//! - [`quotas`]: client quotas as the metadata log holds them, decided and described as
//!   Kafka's controller does, pure and unit-tested.
//! - [`sessions`]: broker liveness on the active controller: BrokerHeartbeat handling,
//!   unfencing once caught up, controlled shutdown, fencing after the session timeout.
//!
//! - [`rpc`]: what brokers ask the active controller (registration, heartbeats,
//!   AlterPartition, topic and config changes) and its answers; [`client`] finds the active
//!   controller and asks it.
//! - [`service`]: a voter: Raft over `controller.quorum.voters` on the controller listener,
//!   and, while it leads, the active controller running the decisions one at a time.
//!
//! Every node runs it: without `controller.quorum.voters` a node is a quorum of one voter
//! (Kafka's combined mode with one controller), so a single node and a cluster take one path.

pub mod client;
mod login;
pub mod metadata;
pub mod network;
pub mod quotas;
pub mod raft;
pub mod rpc;
pub mod service;
pub mod sessions;

#[cfg(test)]
mod quorum_tests {
    //! Three voters in one process, each with its own RocksDB and TCP listener on loopback:
    //! election, replication of records to every image, and losing the leader.

    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use openraft::{Config, Raft};
    use tokio::net::TcpListener;
    use tokio::sync::watch;
    use uuid::Uuid;

    use super::metadata::{Image, Record};
    use super::network::{self, Network};
    use super::raft::{open_db, LogStore, StateMachine, TypeConfig};

    struct Voter {
        raft: Raft<TypeConfig>,
        image: watch::Receiver<Arc<Image>>,
        stop: watch::Sender<bool>,
        _dir: tempfile::TempDir,
    }

    async fn voter(id: u64, listener: TcpListener) -> Voter {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db(dir.path()).unwrap();
        let sm = StateMachine::open(db.clone()).unwrap();
        let image = sm.subscribe();
        let config = Config {
            cluster_name: "cairn-test".into(),
            heartbeat_interval: 50,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Default::default()
        };
        let raft = Raft::new(
            id,
            Arc::new(config.validate().unwrap()),
            Network {
                addrs: BTreeMap::new(),
                dial: Arc::new(crate::dial::Dialer::controller(
                    &crate::config::Config::from_props(BTreeMap::new()).unwrap(),
                    None,
                )),
            },
            LogStore::new(db),
            sm,
        )
        .await
        .unwrap();
        let (stop, rx) = watch::channel(false);
        tokio::spawn(network::serve(listener, None, None, raft.clone(), None, rx));
        Voter {
            raft,
            image,
            stop,
            _dir: dir,
        }
    }

    /// Waits (bounded, for liveness only) until every voter's image satisfies `ok`.
    async fn converge(voters: &[&Voter], ok: impl Fn(&Image) -> bool) {
        for v in voters {
            let mut rx = v.image.clone();
            tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|i| ok(i)))
                .await
                .expect("images converge")
                .unwrap();
        }
    }

    async fn leader(voters: &[&Voter]) -> u64 {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                for v in voters {
                    if let Some(l) = v.raft.current_leader().await {
                        if voters.iter().any(|v| v.raft.metrics().borrow().id == l) {
                            return l;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("a leader is elected")
    }

    fn topic(name: &str) -> Vec<Record> {
        vec![Record::Topic {
            name: name.into(),
            id: Uuid::new_v4(),
            configs: Default::default(),
        }]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_voters_elect_replicate_and_survive_the_leader() {
        let mut listeners = Vec::new();
        for _ in 0..3 {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let members: BTreeMap<u64, openraft::BasicNode> = listeners
            .iter()
            .enumerate()
            .map(|(i, l)| (i as u64 + 1, network::node(l.local_addr().unwrap())))
            .collect();
        let mut voters = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            voters.push(voter(i as u64 + 1, l).await);
        }
        voters[0].raft.initialize(members).await.unwrap();
        let all: Vec<&Voter> = voters.iter().collect();
        let first = leader(&all).await;
        let lead = &voters[first as usize - 1];
        lead.raft.client_write(topic("a")).await.unwrap();
        lead.raft.client_write(topic("b")).await.unwrap();
        converge(&all, |i| {
            i.names.contains_key("a") && i.names.contains_key("b")
        })
        .await;
        // A follower refuses writes and names the leader.
        let follower = voters
            .iter()
            .find(|v| v.raft.metrics().borrow().id != first)
            .unwrap();
        let err = follower.raft.client_write(topic("x")).await.unwrap_err();
        assert!(err.forward_to_leader().is_some(), "{err}");

        // The leader goes away: the other two elect a new one, which commits.
        lead.stop.send_replace(true);
        lead.raft.shutdown().await.unwrap();
        let rest: Vec<&Voter> = voters
            .iter()
            .filter(|v| v.raft.metrics().borrow().id != first)
            .collect();
        let second = leader(&rest).await;
        assert_ne!(second, first);
        let new_lead = &voters[second as usize - 1];
        new_lead.raft.client_write(topic("c")).await.unwrap();
        converge(&rest, |i| i.names.contains_key("c")).await;
        let images: Vec<Arc<Image>> = rest.iter().map(|v| v.image.borrow().clone()).collect();
        assert_eq!(images[0].topics, images[1].topics);
        assert_eq!(images[0].names.len(), 3);
        for v in &rest {
            v.raft.shutdown().await.unwrap();
        }
    }
}
