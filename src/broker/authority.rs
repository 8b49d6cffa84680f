//! The metadata authority: the one way handlers change topics, partitions, leaders and
//! reassignments, and read the quorum. Whether a controller quorum decides (a cluster) or
//! this node alone does (a single node without `controller.quorum.voters`) is settled here
//! and nowhere else, so handlers check a request's shape, call one method and answer.
//!
//! On a single node the catalog is changed directly and the cluster-only operations answer
//! as a one-broker Kafka cluster would (nothing to elect or move). The next step makes a
//! single node a quorum of one voter, as Kafka's combined mode runs it; then this file
//! keeps only the cluster half.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::Broker;
use crate::controller::rpc::QuorumState;
use crate::error::{Error, Result};
use crate::placement::Placement;
use crate::replication::Layout;
use crate::topics::NewTopic;

/// A partition being reassigned, as ListPartitionReassignments shows it.
pub struct Reassigning {
    pub index: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// An error answered with its own code and message (the decision named both).
fn explained(error: ResponseError, message: String) -> Error {
    Error::Controller { error, message }
}

impl Broker {
    /// Creates topic `name` (or, with `validate_only`, checks that it could be created).
    pub async fn create_topic(
        &self,
        name: &str,
        layout: Layout,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<()> {
        if let Some(c) = self.cluster() {
            crate::topics::validate_topic_name(name)?;
            for (k, v) in &configs {
                crate::topic_config::validate(k, v)?;
            }
            return c.create_topic(name, layout, configs, validate_only).await;
        }
        let (partitions, replication_factor) = match &layout {
            Layout::Spread {
                partitions,
                replication_factor,
            } => (*partitions, *replication_factor),
            Layout::Assigned(a) => {
                if let Some(b) = a.iter().flatten().find(|b| **b != self.node_id()) {
                    return Err(Error::InvalidReplicaAssignment(format!(
                        "broker {b} does not exist"
                    )));
                }
                (a.len() as i32, a.first().map_or(0, |r| r.len() as i16))
            }
        };
        let new = NewTopic {
            name,
            partitions,
            replication_factor,
            configs,
        };
        if validate_only {
            self.catalog.validate_new(&new)
        } else {
            self.catalog.create(new).await.map(|_| ())
        }
    }

    /// Creates a topic with the broker's defaults, as Metadata's auto-creation does. In a
    /// cluster a refusal is LEADER_NOT_AVAILABLE, as in Kafka: the controller may have decided
    /// before enough brokers registered, and the client asks again.
    pub async fn auto_create(&self, name: &str) -> Result<()> {
        let layout = Layout::Spread {
            partitions: self.config.num_partitions,
            replication_factor: self.config.default_replication_factor,
        };
        let created = self
            .create_topic(name, layout, BTreeMap::new(), false)
            .await;
        match created {
            Err(e) if self.cluster().is_some() => {
                Err(explained(ResponseError::LeaderNotAvailable, e.to_string()))
            }
            other => other,
        }
    }

    /// Replaces a topic's config overrides (AlterConfigs, IncrementalAlterConfigs): in a
    /// cluster through the controller, so every broker applies them in metadata order.
    pub async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<()> {
        let Some(c) = self.cluster() else {
            return self.catalog.set_configs(name, configs, validate_only).await;
        };
        // Validates (and finds the topic) without changing anything.
        self.catalog
            .set_configs(name, configs.clone(), true)
            .await?;
        if validate_only {
            return Ok(());
        }
        c.set_topic_configs(name, configs).await
    }

    /// Deletes topic `name`; answers the id it had.
    pub async fn delete_topic(&self, name: &str) -> Result<Uuid> {
        let Some(c) = self.cluster() else {
            return self.catalog.delete(name).await;
        };
        if !self.config.delete_topic_enable {
            return Err(Error::TopicDeletionDisabled);
        }
        let id = self.catalog.get(name).map(|t| t.id).unwrap_or_default();
        c.delete_topic(name).await.map(|()| id)
    }

    /// Grows topic `name` to `count` partitions, placed as `assignment` says (one replica
    /// list per new partition) or by the controller.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignment: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<()> {
        if let Some(c) = self.cluster() {
            return c
                .create_partitions(name, count, assignment, validate_only)
                .await;
        }
        let me = self.node_id();
        if let Some(a) = &assignment {
            if a.iter().flatten().any(|b| *b != me) {
                return Err(Error::InvalidReplicaAssignment(
                    "the assignment names a broker that does not exist".into(),
                ));
            }
            if a.iter().any(|r| r.len() != 1) {
                return Err(Error::InvalidReplicaAssignment(
                    "each new partition needs exactly one replica on this single-node cluster"
                        .into(),
                ));
            }
        }
        self.catalog
            .create_partitions(name, count, validate_only)
            .await
    }

    /// Elects a leader for `topic`-`index` where `place` shows one is needed: the preferred
    /// replica, or (`unclean`) any live replica of a partition without a leader.
    pub async fn elect_leader(
        &self,
        topic: &str,
        index: i32,
        place: &Placement,
        unclean: bool,
    ) -> Result<()> {
        let not_needed = |why: &str| explained(ResponseError::ElectionNotNeeded, why.into());
        if unclean {
            return match self.cluster() {
                Some(c) if place.leader < 0 => c.elect_unclean(topic, index).await,
                _ => Err(not_needed("the partition has a leader")),
            };
        }
        if place.replicas.first() == Some(&place.leader) {
            return Err(not_needed("the preferred replica already leads"));
        }
        match self.cluster() {
            Some(c) => c.elect_preferred(topic, index).await,
            // Unreachable in practice: this node is every partition's only, preferred replica.
            None => Err(explained(
                ResponseError::PreferredLeaderNotAvailable,
                Error::NotLeaderOrFollower.to_string(),
            )),
        }
    }

    /// Starts, replaces or (`target: None`) cancels the reassignment of `topic`-`index`.
    pub async fn reassign(
        &self,
        topic: &str,
        index: i32,
        target: Option<Vec<i32>>,
        allow_rf_change: bool,
    ) -> Result<()> {
        if let Some(c) = self.cluster() {
            return c.reassign(topic, index, target, allow_rf_change).await;
        }
        // A single node has nothing to move: its own id is the only assignment, in place.
        self.catalog.partition(topic, index)?;
        let me = self.node_id();
        match target.as_deref() {
            None => Err(explained(
                ResponseError::NoReassignmentInProgress,
                format!("no reassignment of {topic}-{index} is in progress"),
            )),
            Some([b]) if *b == me => Ok(()),
            Some(t) => Err(explained(
                ResponseError::InvalidReplicaAssignment,
                match t.iter().find(|b| **b != me) {
                    Some(b) => format!(
                        "the reassignment of {topic}-{index} names broker {b}, which is not registered"
                    ),
                    None => format!(
                        "the reassignment of {topic}-{index} must name broker {me} exactly once"
                    ),
                },
            )),
        }
    }

    /// The ongoing reassignments of `topic` (of the partitions in `indexes`, or all), from
    /// this broker's metadata image.
    pub fn reassignments(&self, topic: &str, indexes: Option<&[i32]>) -> Vec<Reassigning> {
        let Some(c) = self.cluster() else {
            return Vec::new();
        };
        let image = c.image();
        let Some(t) = image.names.get(topic).and_then(|id| image.topics.get(id)) else {
            return Vec::new();
        };
        t.partitions
            .iter()
            .zip(0..)
            .filter(|(p, i)| p.reassigning() && indexes.is_none_or(|ix| ix.contains(i)))
            .map(|(p, i)| Reassigning {
                index: i,
                replicas: p.replicas.clone(),
                adding: p.adding.clone(),
                removing: p.removing.clone(),
            })
            .collect()
    }

    /// The topics in the metadata image, for a request that names none.
    pub fn image_topic_names(&self) -> Vec<String> {
        self.cluster()
            .map(|c| c.image().names.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The metadata quorum, from the active controller; the error and message to answer
    /// otherwise.
    pub async fn describe_quorum(
        &self,
    ) -> std::result::Result<QuorumState, (ResponseError, String)> {
        let Some(c) = self.cluster() else {
            return Err((
                ResponseError::UnknownTopicOrPartition,
                "no metadata quorum: this broker runs alone (no controller.quorum.voters)".into(),
            ));
        };
        c.describe_quorum()
            .await
            .map_err(|e| (ResponseError::NotLeaderOrFollower, e.to_string()))
    }

    /// A fetch of `p` from `fetch_offset`: from a follower replica (`replica_id` >= 0) it
    /// also reports that follower's progress. Only the leader serves fetches.
    pub fn check_fetch(
        &self,
        p: &std::sync::Arc<crate::topics::Partition>,
        replica_id: i32,
        fetch_offset: i64,
    ) -> Result<()> {
        match self.cluster() {
            Some(c) if replica_id >= 0 => c.follower_fetched(p, replica_id, fetch_offset),
            _ => p.replica.check_leader(self.node_id()),
        }
    }
}
