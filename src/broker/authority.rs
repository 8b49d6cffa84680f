//! The metadata authority: the one way handlers change topics, partitions, leaders and
//! reassignments, and read the quorum. Every change is decided by the active controller of
//! the metadata quorum (on a single node, its own voter) and reaches the catalog through the
//! image, so handlers check a request's shape, call one method and answer.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::Broker;
use crate::controller::metadata::{ScramResult, ScramUpsertion};
use crate::controller::quotas;
use crate::controller::rpc::QuorumState;
use crate::error::{Error, Result};
use crate::placement::Placement;
use crate::replication::Layout;
use crate::security::scram::Credential;

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
        crate::topics::validate_topic_name(name)?;
        for (k, v) in &configs {
            crate::topic_config::validate(k, v)?;
        }
        self.quorum()?
            .create_topic(name, layout, configs, validate_only)
            .await
    }

    /// Creates a topic with the broker's defaults, as Metadata's auto-creation does. A
    /// refusal is LEADER_NOT_AVAILABLE, as in Kafka: the controller may have decided before
    /// enough brokers registered, and the client asks again.
    pub async fn auto_create(&self, name: &str) -> Result<()> {
        let layout = Layout::Spread {
            partitions: self.config.num_partitions,
            replication_factor: self.config.default_replication_factor,
        };
        match self
            .create_topic(name, layout, BTreeMap::new(), false)
            .await
        {
            Err(e) if e.response_error() == ResponseError::TopicAlreadyExists => Ok(()),
            Err(e @ Error::InvalidTopic(_)) => Err(e),
            Err(e) => Err(explained(ResponseError::LeaderNotAvailable, e.to_string())),
            Ok(()) => Ok(()),
        }
    }

    /// Replaces a topic's config overrides (AlterConfigs, IncrementalAlterConfigs) through
    /// the controller, so every broker applies them in metadata order.
    pub async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<()> {
        if self.catalog.get(name).is_none() {
            return Err(Error::UnknownTopicOrPartition);
        }
        for (k, v) in &configs {
            crate::topic_config::validate(k, v)?;
        }
        if validate_only {
            return Ok(());
        }
        self.quorum()?.set_topic_configs(name, configs).await
    }

    /// Replaces a group's configs (IncrementalAlterConfigs on a GROUP resource) through the
    /// controller, so every broker applies them in metadata order. Each is checked against
    /// the broker's bounds first.
    pub async fn set_group_configs(
        &self,
        group: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<()> {
        if group.is_empty() {
            return Err(Error::InvalidRequest(
                "a group config needs a group id".into(),
            ));
        }
        for (k, v) in &configs {
            crate::group_config::validate(k, v, &self.config)?;
        }
        if validate_only {
            return Ok(());
        }
        self.quorum()?.set_group_configs(group, configs).await
    }

    /// Replaces the dynamic configs of broker `broker` (this broker's id, or "" for the
    /// cluster's defaults) through the controller. Only [`crate::config::keys::DYNAMIC`]
    /// keys are taken (INVALID_REQUEST otherwise, as Kafka answers), and the set must read
    /// as this broker's settings (INVALID_CONFIG naming the key otherwise).
    pub async fn set_broker_configs(
        &self,
        broker: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<()> {
        only_dynamic(configs.keys().map(String::as_str))?;
        let live = self.catalog.config();
        let (cluster, mine) = match broker.is_empty() {
            true => (configs.clone(), live.layers.broker.clone()),
            false => (live.layers.cluster.clone(), configs.clone()),
        };
        let next = live
            .with_dynamic(cluster, mine)
            .map_err(|e| Error::InvalidConfig(e.to_string()))?;
        // Kafka's rule for resizing the cleaner: at most double, at least half.
        let (now, then) = (live.log_cleaner_threads, next.log_cleaner_threads);
        if then > now * 2 || then < now / 2 {
            return Err(Error::InvalidConfig(format!(
                "log.cleaner.threads can go from {now} to {} at least and {} at most at once, not {then}",
                now / 2,
                now * 2
            )));
        }
        if validate_only {
            return Ok(());
        }
        self.quorum()?.set_broker_configs(broker, configs).await
    }

    /// AlterUserScramCredentials: each user's answer.
    pub async fn alter_scram(
        &self,
        deletions: Vec<(String, i8)>,
        upsertions: Vec<ScramUpsertion>,
    ) -> Result<Vec<ScramResult>> {
        self.quorum()?.alter_scram(deletions, upsertions).await
    }

    /// AlterClientQuotas: each entry's answer.
    pub async fn alter_client_quotas(
        &self,
        alterations: Vec<quotas::Alteration>,
        validate_only: bool,
    ) -> Result<Vec<quotas::AlterResult>> {
        self.quorum()?
            .alter_client_quotas(alterations, validate_only)
            .await
    }

    /// DescribeClientQuotas on this broker's image (nothing before it joined the cluster):
    /// the matching entities and their values, or the filter's error.
    pub fn describe_client_quotas(
        &self,
        components: &[quotas::Component],
        strict: bool,
    ) -> std::result::Result<Vec<quotas::Quotas>, (ResponseError, String)> {
        let image = self.cluster().map(|c| c.image());
        let none = quotas::Table::new();
        let table = image.as_ref().map_or(&none, |i| &i.client_quotas);
        quotas::describe(table, components, strict)
            .map(|found| found.into_iter().cloned().collect())
    }

    /// The byte-rate quota of `kind` a `principal` (asked only when quotas are set) with
    /// `client_id` is held to on this broker, from the image it applied (none before it
    /// joined the cluster).
    pub fn client_quota(
        &self,
        kind: super::throttle::Kind,
        principal: impl FnOnce() -> String,
        client_id: &str,
    ) -> Option<quotas::Applied> {
        let image = self.cluster()?.image();
        if image.client_quotas.is_empty() {
            return None;
        }
        super::throttle::applying(&image.client_quotas, kind, &principal(), client_id)
    }

    /// The `connection_creation_rate` quota new connections from `ip` are held to, if any.
    pub fn ip_connection_rate(&self, ip: std::net::IpAddr) -> Option<f64> {
        let image = self.cluster()?.image();
        if image.client_quotas.is_empty() {
            return None;
        }
        quotas::ip_connection_rate(&image.client_quotas, ip)
    }

    /// The SCRAM credentials of `user`, by mechanism name (none before this broker joined
    /// the cluster).
    pub fn scram_credentials(&self, user: &str) -> BTreeMap<String, Credential> {
        self.cluster()
            .and_then(|c| c.image().scram.get(user).cloned())
            .unwrap_or_default()
    }

    /// Every user with a SCRAM credential.
    pub fn scram_users(&self) -> Vec<String> {
        self.cluster()
            .map(|c| c.image().scram.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The configs set on `group` (none before this broker joined the cluster).
    pub fn group_configs(&self, group: &str) -> BTreeMap<String, String> {
        self.cluster()
            .and_then(|c| c.image().group_configs.get(group).cloned())
            .unwrap_or_default()
    }

    /// The settings in force for `group`: its configs over the broker's defaults.
    pub fn group_settings(&self, group: &str) -> crate::group_config::GroupSettings {
        let image = self.cluster().map(|c| c.image());
        let configs = image.as_ref().and_then(|i| i.group_configs.get(group));
        crate::group_config::GroupSettings::resolve(configs, &self.config)
    }

    /// Deletes topic `name`; answers the id it had.
    pub async fn delete_topic(&self, name: &str) -> Result<Uuid> {
        if !self.config.delete_topic_enable {
            return Err(Error::TopicDeletionDisabled);
        }
        let id = self.catalog.get(name).map(|t| t.id).unwrap_or_default();
        self.quorum()?.delete_topic(name).await.map(|()| id)
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
        self.quorum()?
            .create_partitions(name, count, assignment, validate_only)
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
            if place.leader >= 0 {
                return Err(not_needed("the partition has a leader"));
            }
            return self.quorum()?.elect_unclean(topic, index).await;
        }
        if place.replicas.first() == Some(&place.leader) {
            return Err(not_needed("the preferred replica already leads"));
        }
        self.quorum()?.elect_preferred(topic, index).await
    }

    /// UpdateFeatures: new finalized levels for cluster features, decided by the controller.
    pub async fn update_features(
        &self,
        updates: Vec<crate::controller::metadata::FeatureUpdate>,
        validate_only: bool,
    ) -> Result<()> {
        self.quorum()?.update_features(updates, validate_only).await
    }

    /// Starts, replaces or (`target: None`) cancels the reassignment of `topic`-`index`.
    pub async fn reassign(
        &self,
        topic: &str,
        index: i32,
        target: Option<Vec<i32>>,
        allow_rf_change: bool,
    ) -> Result<()> {
        self.quorum()?
            .reassign(topic, index, target, allow_rf_change)
            .await
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
        let asked = match self.quorum() {
            Ok(c) => c.describe_quorum().await,
            Err(e) => Err(e),
        };
        asked.map_err(|e| (ResponseError::NotLeaderOrFollower, e.to_string()))
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

/// INVALID_REQUEST naming the keys of `names` a running broker does not take, as Kafka
/// answers them; Ok when all are dynamic ([`crate::config::keys::DYNAMIC`]).
pub fn only_dynamic<'a>(names: impl Iterator<Item = &'a str>) -> Result<()> {
    let fixed: Vec<&str> = names
        .filter(|k| !crate::config::keys::is_dynamic(k))
        .collect();
    match fixed.is_empty() {
        true => Ok(()),
        false => Err(Error::InvalidRequest(format!(
            "Cannot update these configs dynamically: {}",
            fixed.join(", ")
        ))),
    }
}
