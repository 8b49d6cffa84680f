//! What brokers ask the active controller (KRaft's BrokerRegistration, BrokerHeartbeat,
//! AlterPartition, and the topic changes clients request through any broker), and the
//! broker's side of asking: [`ControllerClient`] finds the active controller among the voters
//! and follows its hints. The messages travel on the controller listener next to Raft's own.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio::time::Instant;
use uuid::Uuid;

use super::metadata::Endpoint;
use super::network::{read_frame, write_frame, Reply, Rpc};
use crate::config::Voter;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum BrokerRequest {
    Register {
        id: i32,
        incarnation: Uuid,
        endpoints: Vec<Endpoint>,
        rack: Option<String>,
    },
    Heartbeat {
        broker: i32,
        broker_epoch: i64,
        metadata_offset: i64,
        want_fence: bool,
        want_shut_down: bool,
    },
    AlterPartition {
        broker: i32,
        broker_epoch: i64,
        topic: Uuid,
        index: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<i32>,
    },
    CreateTopic {
        name: String,
        partitions: i32,
        replication_factor: i16,
        configs: std::collections::BTreeMap<String, String>,
        validate_only: bool,
        /// Replicas per partition, when CreateTopics gave them (then `partitions` and
        /// `replication_factor` are ignored).
        #[serde(default)]
        assignment: Option<Vec<Vec<i32>>>,
    },
    DeleteTopic {
        name: String,
    },
    CreatePartitions {
        name: String,
        count: i32,
        validate_only: bool,
        /// Replicas per new partition, when CreatePartitions gave them.
        #[serde(default)]
        assignment: Option<Vec<Vec<i32>>>,
    },
    ElectPreferred {
        topic: String,
        index: i32,
    },
    /// DescribeQuorum: the active controller's view of the Raft quorum.
    DescribeQuorum,
    /// ElectLeaders with the UNCLEAN type: a leaderless partition takes any live replica.
    ElectUnclean {
        topic: String,
        index: i32,
    },
    /// AlterPartitionReassignments for one partition; `target: None` cancels.
    Reassign {
        topic: String,
        index: i32,
        target: Option<Vec<i32>>,
        allow_rf_change: bool,
    },
    SetTopicConfigs {
        name: String,
        configs: std::collections::BTreeMap<String, String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrokerReply {
    /// This voter is not the active controller; `leader` is the one it knows of.
    NotController {
        leader: Option<i32>,
    },
    /// A Kafka error code and message.
    Error {
        code: i16,
        message: Option<String>,
    },
    Registered {
        epoch: i64,
    },
    Heartbeat {
        is_caught_up: bool,
        is_fenced: bool,
        should_shut_down: bool,
    },
    TopicCreated {
        id: Uuid,
    },
    Done,
    Quorum(QuorumState),
}

/// The metadata quorum as its leader sees it (KRaft's DescribeQuorum): offsets are Raft
/// log positions, the epoch is the Raft term.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumState {
    pub leader: i32,
    pub epoch: i32,
    /// The next position after the last entry applied, which the quorum committed.
    pub high_watermark: i64,
    /// (voter id, log end offset as far as the leader knows; -1 if unknown).
    pub voters: Vec<(i32, i64)>,
}

impl BrokerReply {
    pub fn error(e: kafka_protocol::ResponseError) -> BrokerReply {
        BrokerReply::Error {
            code: e.code(),
            message: None,
        }
    }

    /// An error with the decision's own message.
    pub fn explained((e, message): (kafka_protocol::ResponseError, String)) -> BrokerReply {
        BrokerReply::Error {
            code: e.code(),
            message: Some(message),
        }
    }
}

/// How long one voter gets to answer before the next is tried.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);

/// The broker's way to the active controller.
pub struct ControllerClient {
    voters: Vec<Voter>,
    leader: std::sync::Mutex<Option<i32>>,
}

impl ControllerClient {
    pub fn new(voters: Vec<Voter>) -> ControllerClient {
        ControllerClient {
            voters,
            leader: std::sync::Mutex::new(None),
        }
    }

    fn leader(&self) -> Option<i32> {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_leader(&self, id: Option<i32>) {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = id;
    }

    async fn call_one(voter: &Voter, req: &BrokerRequest) -> std::io::Result<BrokerReply> {
        let addr = format!("{}:{}", voter.host, voter.port);
        let mut s = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(&addr))
            .await
            .map_err(|_| std::io::Error::other(format!("connecting to {addr} timed out")))??;
        let _ = s.set_nodelay(true);
        write_frame(&mut s, &Rpc::Broker(req.clone())).await?;
        match read_frame(&mut s).await? {
            Reply::Broker(r) => Ok(r),
            _ => Err(std::io::Error::other("answer does not match the request")),
        }
    }

    /// Sends `req` to the active controller, trying voters in turn and following hints,
    /// until it answers or `timeout` passes (then `None`).
    pub async fn call(&self, req: BrokerRequest, timeout: Duration) -> Option<BrokerReply> {
        let deadline = Instant::now() + timeout;
        let mut next = 0usize;
        loop {
            let voter = match self
                .leader()
                .and_then(|l| self.voters.iter().find(|v| v.id == l))
            {
                Some(v) => v.clone(),
                None => {
                    next += 1;
                    self.voters[next % self.voters.len()].clone()
                }
            };
            // A voter that is stopped (SIGSTOP, a hung host) still accepts connections, so
            // each attempt is bounded well under a broker session; then the next voter.
            let attempt = deadline.min(Instant::now() + ATTEMPT_TIMEOUT);
            let answer = tokio::time::timeout_at(attempt, Self::call_one(&voter, &req))
                .await
                .unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no answer in time",
                    ))
                });
            match answer {
                Ok(BrokerReply::NotController { leader }) => {
                    let hint = leader.filter(|l| *l != voter.id);
                    self.set_leader(hint);
                    if hint.is_none() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                Ok(reply) => {
                    self.set_leader(Some(voter.id));
                    return Some(reply);
                }
                Err(e) => {
                    tracing::debug!(voter = voter.id, error = %e, "controller call failed");
                    self.set_leader(None);
                    next = self
                        .voters
                        .iter()
                        .position(|v| v.id == voter.id)
                        .unwrap_or(next);
                    // A timeout already waited; a refused or broken connection waits a bit.
                    if e.kind() != std::io::ErrorKind::TimedOut {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }
}
