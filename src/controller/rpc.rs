//! What brokers ask the active controller (KRaft's BrokerRegistration, BrokerHeartbeat,
//! AlterPartition, and the topic changes clients request through any broker), and its
//! answers. The messages travel on the controller listener next to Raft's own
//! ([`super::network`]); [`super::client`] sends them.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::metadata::Endpoint;

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
    /// IncrementalAlterConfigs on a GROUP resource: the group's configs, whole.
    SetGroupConfigs {
        group: String,
        configs: std::collections::BTreeMap<String, String>,
    },
    /// (Incremental)AlterConfigs on a BROKER resource: its dynamic configs, whole ("" for
    /// the cluster's defaults).
    SetBrokerConfigs {
        broker: String,
        configs: std::collections::BTreeMap<String, String>,
    },
    /// AlterUserScramCredentials: each user's change stands alone.
    AlterScram {
        deletions: Vec<(String, i8)>,
        upsertions: Vec<super::metadata::ScramUpsertion>,
    },
    /// AlterClientQuotas: each entry stands alone (`validate_only`: only checked).
    AlterClientQuotas {
        alterations: Vec<super::quotas::Alteration>,
        validate_only: bool,
    },
    /// CreateAcls: each binding stands alone.
    CreateAcls {
        bindings: Vec<crate::security::acl::Binding>,
    },
    /// DeleteAcls: each filter stands alone.
    DeleteAcls {
        filters: Vec<crate::security::acl::Filter>,
    },
    /// UpdateFeatures: new finalized levels, all or none (`validate_only`: only checked).
    UpdateFeatures {
        updates: Vec<super::metadata::FeatureUpdate>,
        validate_only: bool,
    },
    /// KIP-730's AllocateProducerIds: a block of producer ids unique in the cluster.
    AllocateProducerIds {
        broker: i32,
        broker_epoch: i64,
        at_least: i64,
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
        /// The metadata offset the controller had applied when it answered (the broker's
        /// lease holds again once it has applied as much).
        metadata_offset: i64,
    },
    TopicCreated {
        id: Uuid,
    },
    Done,
    Quorum(QuorumState),
    /// AlterUserScramCredentials' answer, per user.
    Scram(Vec<super::metadata::ScramResult>),
    /// AlterClientQuotas' answer, per entry.
    ClientQuotas(Vec<super::quotas::AlterResult>),
    /// CreateAcls' answer, per binding: why it was refused, if it was.
    AclsCreated(Vec<Option<String>>),
    /// DeleteAcls' answer, per filter: the bindings it removed, or why it was refused.
    AclsDeleted(Vec<Result<Vec<crate::security::acl::Binding>, String>>),
    /// Producer ids `start..start + len` belong to the asking broker.
    ProducerIds {
        start: i64,
        len: i64,
    },
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
