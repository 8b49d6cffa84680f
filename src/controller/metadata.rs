//! The cluster metadata state machine: KRaft's records and the image they build, and the
//! controller's decisions that turn requests into records.
//!
//! Two halves, both pure (no I/O, no clock):
//!
//! - [`Image::apply`] folds one committed [`Record`] into the image. It is deterministic and
//!   never fails, so every voter and broker that applies the same log holds the same image.
//! - The decision methods (`register_broker`, `create_topic`, `alter_partition`,
//!   `fence_broker`, ...) run on the active controller against its image and return the
//!   records to commit, or the Kafka error to answer. Every partition change is a
//!   compare-and-set: it names the partition epoch it was decided on, and `apply` drops a
//!   change whose epoch is no longer current (a decision raced by another commit).
//!
//! The Raft log that orders the records (openraft) and the RPCs that feed the decisions
//! (BrokerRegistration, BrokerHeartbeat, AlterPartition) sit around this module.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::quotas;
use crate::security::acl::{Binding, Filter};
use crate::security::scram::Credential;

/// "No leader": the partition is offline.
pub const NO_LEADER: i32 = -1;

/// A new cluster id of Kafka's length (22 characters), minted once per data dir on its
/// first start; the first active controller writes its own into the metadata log.
pub fn new_cluster_id() -> String {
    Uuid::new_v4().simple().to_string()[..22].to_string()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub listener: String,
    pub host: String,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerState {
    pub id: i32,
    /// The offset of the registration record: new on every registration, never reused.
    pub epoch: i64,
    pub incarnation: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
    /// Fenced brokers neither lead nor join an ISR; a broker registers fenced.
    pub fenced: bool,
    /// In controlled shutdown: leads nothing, joins no ISR.
    pub shutting_down: bool,
}

impl BrokerState {
    fn eligible(&self) -> bool {
        !self.fenced && !self.shutting_down
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// In preference order: the first is the preferred leader.
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader: i32,
    /// Bumped on every leader change; stamped into the batches that leader writes.
    pub leader_epoch: i32,
    /// Bumped on every change at all; what compare-and-set compares.
    pub partition_epoch: i32,
    /// An ongoing reassignment (KIP-455): replicas joining, which must all reach the ISR
    /// before it completes, and replicas leaving then. `replicas` holds both meanwhile.
    #[serde(default)]
    pub adding: Vec<i32>,
    #[serde(default)]
    pub removing: Vec<i32>,
}

impl PartitionState {
    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicState {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<PartitionState>,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

/// A committed metadata change (KRaft's RegisterBrokerRecord, FenceBrokerRecord,
/// TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    RegisterBroker {
        id: i32,
        incarnation: Uuid,
        endpoints: Vec<Endpoint>,
        rack: Option<String>,
    },
    FenceBroker {
        id: i32,
        epoch: i64,
    },
    UnfenceBroker {
        id: i32,
        epoch: i64,
    },
    BrokerShuttingDown {
        id: i32,
        epoch: i64,
    },
    Topic {
        name: String,
        id: Uuid,
        /// The topic's config overrides, as CreateTopics gave them.
        #[serde(default)]
        configs: BTreeMap<String, String>,
    },
    Partition {
        topic: Uuid,
        index: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        leader: i32,
    },
    /// A change decided on `partition_epoch`; dropped if the partition has moved on since.
    /// A new leader bumps the leader epoch; every applied change bumps the partition epoch.
    PartitionChange {
        topic: Uuid,
        index: i32,
        partition_epoch: i32,
        isr: Option<Vec<i32>>,
        leader: Option<i32>,
        replicas: Option<Vec<i32>>,
        /// The reassignment's adding and removing replicas, replaced together.
        #[serde(default)]
        reassignment: Option<(Vec<i32>, Vec<i32>)>,
    },
    RemoveTopic {
        id: Uuid,
    },
    /// A topic's config overrides, replaced whole (KRaft's ConfigRecords for a topic).
    TopicConfigs {
        id: Uuid,
        configs: BTreeMap<String, String>,
    },
    /// The cluster's id, written once by the first active controller.
    ClusterId {
        id: String,
    },
    /// A block of producer ids handed to a broker (KRaft's ProducerIdsRecord): every id
    /// below `next` is taken.
    ProducerIds {
        broker: i32,
        broker_epoch: i64,
        next: i64,
    },
    /// A cluster feature's finalized level (KRaft's FeatureLevelRecord); level 0 removes it.
    FeatureLevel {
        name: String,
        level: i16,
    },
    /// A group's configs, replaced whole (KRaft's ConfigRecords for a GROUP resource);
    /// empty removes them.
    GroupConfigs {
        group: String,
        configs: BTreeMap<String, String>,
    },
    /// Dynamic broker configs, replaced whole (KRaft's ConfigRecords for a BROKER
    /// resource): `broker` is a node id, or empty for the cluster's defaults; empty
    /// `configs` removes them.
    BrokerConfigs {
        broker: String,
        configs: BTreeMap<String, String>,
    },
    /// A user's SCRAM credential for one mechanism, added or replaced (KRaft's
    /// UserScramCredentialRecord): salted, never the password.
    ScramCredential {
        user: String,
        mechanism: String,
        credential: Credential,
    },
    /// KRaft's RemoveUserScramCredentialRecord.
    RemoveScramCredential {
        user: String,
        mechanism: String,
    },
    /// An ACL (KRaft's AccessControlEntryRecord), under the id the controller gave it.
    Acl {
        id: Uuid,
        binding: Binding,
    },
    /// KRaft's RemoveAccessControlEntryRecord.
    RemoveAcl {
        id: Uuid,
    },
    /// One client quota set (`value`) or removed (`None`): KRaft's QuotaRecord.
    ClientQuota {
        entity: quotas::Entity,
        key: String,
        value: Option<quotas::Value>,
    },
}

/// One upsertion of AlterUserScramCredentials: what the client derived from the password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramUpsertion {
    pub user: String,
    /// The wire mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Vec<u8>,
    pub salted_password: Vec<u8>,
}

/// The answer for one user of AlterUserScramCredentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramResult {
    pub user: String,
    pub error: i16,
    pub message: Option<String>,
}

/// The cluster feature of KIP-890 part 2: at level 2 a transactional producer's epoch is
/// bumped at the end of every transaction and partition leaders add partitions to it.
pub const TRANSACTION_VERSION: &str = "transaction.version";
/// KIP-932's feature: share groups are served at level 1 (a new cluster starts there, as
/// Kafka 4.2+ does; `kafka-features downgrade --feature share.version=0` switches them off).
pub const SHARE_VERSION: &str = "share.version";

/// How UpdateFeatures may move a feature (v0's `allow_downgrade` is a safe downgrade).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpgradeType {
    Upgrade,
    SafeDowngrade,
    UnsafeDowngrade,
}

impl UpgradeType {
    /// The wire value (1, 2, 3); anything else is unknown.
    pub fn from_wire(v: i8) -> Option<UpgradeType> {
        match v {
            1 => Some(UpgradeType::Upgrade),
            2 => Some(UpgradeType::SafeDowngrade),
            3 => Some(UpgradeType::UnsafeDowngrade),
            _ => None,
        }
    }
}

/// One feature of an UpdateFeatures request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureUpdate {
    pub name: String,
    /// The new finalized level; 0 removes the feature.
    pub level: i16,
    pub kind: UpgradeType,
}

/// The features this release supports, with the levels it can run: (name, min, max).
pub const SUPPORTED_FEATURES: &[(&str, i16, i16)] =
    &[(SHARE_VERSION, 0, 1), (TRANSACTION_VERSION, 0, 2)];

/// The levels a new cluster starts at (Kafka 4.x formats a new cluster at these).
pub const BOOTSTRAP_FEATURES: &[(&str, i16)] = &[(SHARE_VERSION, 1), (TRANSACTION_VERSION, 2)];

/// Producer ids handed to a broker at a time (Kafka's `ProducerIdManager` block).
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// What AlterPartition asks: the leader's proposed ISR, decided on its view of the partition.
#[derive(Debug, Clone)]
pub struct AlterIsr {
    pub broker: i32,
    pub broker_epoch: i64,
    pub topic: Uuid,
    pub index: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// The metadata as of `offset`, the last record applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub offset: i64,
    #[serde(default)]
    pub cluster_id: Option<String>,
    pub brokers: BTreeMap<i32, BrokerState>,
    pub topics: BTreeMap<Uuid, TopicState>,
    pub names: BTreeMap<String, Uuid>,
    /// The first producer id not yet handed to any broker.
    #[serde(default)]
    pub next_producer_id: i64,
    /// Finalized feature levels; a feature not listed is at level 0.
    #[serde(default)]
    pub features: BTreeMap<String, i16>,
    /// The offset of the last feature change (ApiVersions' FinalizedFeaturesEpoch), -1
    /// before any.
    #[serde(default = "no_offset")]
    pub features_epoch: i64,
    /// Groups' configs (`kafka-configs --entity-type groups`), by group id.
    #[serde(default)]
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Dynamic broker configs (`kafka-configs --entity-type brokers`), by node id; the
    /// cluster's defaults under "".
    #[serde(default)]
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// SCRAM credentials (`kafka-configs --entity-type users`), by user, then mechanism
    /// name.
    #[serde(default)]
    pub scram: BTreeMap<String, BTreeMap<String, Credential>>,
    /// The ACLs (`kafka-acls`), by id.
    #[serde(default)]
    pub acls: BTreeMap<Uuid, Binding>,
    /// Client quotas (`kafka-configs --entity-type users|clients|ips`).
    #[serde(default)]
    pub client_quotas: quotas::Table,
}

fn no_offset() -> i64 {
    -1
}

impl Image {
    pub fn new() -> Image {
        Image {
            offset: -1,
            features_epoch: -1,
            ..Default::default()
        }
    }

    /// A feature's finalized level (0 when it is not finalized).
    pub fn feature(&self, name: &str) -> i16 {
        self.features.get(name).copied().unwrap_or(0)
    }

    pub fn partition(&self, topic: Uuid, index: i32) -> Option<&PartitionState> {
        self.topics
            .get(&topic)?
            .partitions
            .get(usize::try_from(index).ok()?)
    }

    /// Brokers that may take new replicas and leaderships (live, not shutting down).
    pub fn eligible_ids(&self) -> Vec<i32> {
        self.brokers
            .values()
            .filter(|b| b.eligible())
            .map(|b| b.id)
            .collect()
    }

    fn eligible(&self, id: i32) -> bool {
        self.brokers.get(&id).is_some_and(BrokerState::eligible)
    }

    /// Folds one committed record in. Records from a newer writer that this image cannot
    /// place (an unknown topic, a stale compare-and-set) change nothing.
    pub fn apply(&mut self, offset: i64, record: &Record) {
        self.offset = offset;
        match record {
            Record::RegisterBroker {
                id,
                incarnation,
                endpoints,
                rack,
            } => {
                self.brokers.insert(
                    *id,
                    BrokerState {
                        id: *id,
                        epoch: offset,
                        incarnation: *incarnation,
                        endpoints: endpoints.clone(),
                        rack: rack.clone(),
                        fenced: true,
                        shutting_down: false,
                    },
                );
            }
            Record::FenceBroker { id, epoch } | Record::UnfenceBroker { id, epoch } => {
                if let Some(b) = self.brokers.get_mut(id).filter(|b| b.epoch == *epoch) {
                    b.fenced = matches!(record, Record::FenceBroker { .. });
                    if !b.fenced {
                        b.shutting_down = false;
                    }
                }
            }
            Record::BrokerShuttingDown { id, epoch } => {
                if let Some(b) = self.brokers.get_mut(id).filter(|b| b.epoch == *epoch) {
                    b.shutting_down = true;
                }
            }
            Record::Topic { name, id, configs } => {
                self.names.insert(name.clone(), *id);
                self.topics.insert(
                    *id,
                    TopicState {
                        name: name.clone(),
                        id: *id,
                        partitions: Vec::new(),
                        configs: configs.clone(),
                    },
                );
            }
            Record::Partition {
                topic,
                index,
                replicas,
                isr,
                leader,
            } => {
                if let Some(t) = self.topics.get_mut(topic) {
                    if *index as usize == t.partitions.len() {
                        t.partitions.push(PartitionState {
                            replicas: replicas.clone(),
                            isr: isr.clone(),
                            leader: *leader,
                            leader_epoch: 0,
                            partition_epoch: 0,
                            adding: Vec::new(),
                            removing: Vec::new(),
                        });
                    }
                }
            }
            Record::PartitionChange {
                topic,
                index,
                partition_epoch,
                isr,
                leader,
                replicas,
                reassignment,
            } => {
                let Some(p) = self
                    .topics
                    .get_mut(topic)
                    .and_then(|t| t.partitions.get_mut(*index as usize))
                else {
                    return;
                };
                if p.partition_epoch != *partition_epoch {
                    return;
                }
                if let Some(isr) = isr {
                    p.isr = isr.clone();
                }
                if let Some(r) = replicas {
                    p.replicas = r.clone();
                }
                if let Some((adding, removing)) = reassignment {
                    p.adding = adding.clone();
                    p.removing = removing.clone();
                }
                if let Some(l) = leader {
                    if *l != p.leader {
                        p.leader = *l;
                        p.leader_epoch += 1;
                    }
                }
                p.partition_epoch += 1;
            }
            Record::RemoveTopic { id } => {
                if let Some(t) = self.topics.remove(id) {
                    self.names.remove(&t.name);
                }
            }
            Record::TopicConfigs { id, configs } => {
                if let Some(t) = self.topics.get_mut(id) {
                    t.configs = configs.clone();
                }
            }
            Record::ClusterId { id } => {
                if self.cluster_id.is_none() {
                    self.cluster_id = Some(id.clone());
                }
            }
            Record::ProducerIds { next, .. } => {
                self.next_producer_id = self.next_producer_id.max(*next);
            }
            Record::FeatureLevel { name, level } => {
                match *level > 0 {
                    true => self.features.insert(name.clone(), *level),
                    false => self.features.remove(name),
                };
                self.features_epoch = offset;
            }
            Record::GroupConfigs { group, configs } => {
                match configs.is_empty() {
                    true => self.group_configs.remove(group),
                    false => self.group_configs.insert(group.clone(), configs.clone()),
                };
            }
            Record::BrokerConfigs { broker, configs } => {
                match configs.is_empty() {
                    true => self.broker_configs.remove(broker),
                    false => self.broker_configs.insert(broker.clone(), configs.clone()),
                };
            }
            Record::ScramCredential {
                user,
                mechanism,
                credential,
            } => {
                self.scram
                    .entry(user.clone())
                    .or_default()
                    .insert(mechanism.clone(), credential.clone());
            }
            Record::Acl { id, binding } => {
                self.acls.insert(*id, binding.clone());
            }
            Record::RemoveAcl { id } => {
                self.acls.remove(id);
            }
            Record::ClientQuota { entity, key, value } => {
                quotas::apply(&mut self.client_quotas, entity, key, *value);
            }
            Record::RemoveScramCredential { user, mechanism } => {
                if let Some(mechanisms) = self.scram.get_mut(user) {
                    mechanisms.remove(mechanism);
                    if mechanisms.is_empty() {
                        self.scram.remove(user);
                    }
                }
            }
        }
    }

    /// AllocateProducerIds: the next block of producer ids for `broker`, never below
    /// `at_least` (the end of what the broker itself reserved before it asked the quorum, so
    /// ids from an earlier single-node release are never handed out again). Returns the
    /// block's first id.
    pub fn allocate_producer_ids(
        &self,
        broker: i32,
        broker_epoch: i64,
        at_least: i64,
    ) -> Result<(i64, Vec<Record>), ResponseError> {
        if self
            .brokers
            .get(&broker)
            .is_none_or(|b| b.epoch != broker_epoch)
        {
            return Err(ResponseError::StaleBrokerEpoch);
        }
        let start = self.next_producer_id.max(at_least).max(0);
        let next = start
            .checked_add(PRODUCER_ID_BLOCK)
            .ok_or(ResponseError::UnknownServerError)?;
        Ok((
            start,
            vec![Record::ProducerIds {
                broker,
                broker_epoch,
                next,
            }],
        ))
    }

    // ---- decisions (on the active controller) ------------------------------------------

    /// UpdateFeatures (KIP-584, `kafka-features upgrade/downgrade`): the records that set
    /// each feature to its new level, all or none, as Kafka's `FeatureControlManager`
    /// decides. A level this release does not support, a downgrade asked as an upgrade or
    /// an upgrade asked as a downgrade is INVALID_UPDATE_VERSION with Kafka's message
    /// (`controller` is this controller's node id, which Kafka's messages name).
    pub fn update_features(
        &self,
        updates: &[FeatureUpdate],
        controller: i32,
    ) -> Result<Vec<Record>, (ResponseError, String)> {
        let mut records = Vec::with_capacity(updates.len());
        for u in updates {
            let invalid = |why: String| {
                (
                    ResponseError::InvalidUpdateVersion,
                    format!(
                        "The update failed for all features since the following feature had \
                         an error: Invalid update version {} for feature {}. {why}",
                        u.level, u.name
                    ),
                )
            };
            let current = self.feature(&u.name);
            if u.level < 0 {
                return Err(invalid("A feature version cannot be less than 0.".into()));
            }
            match SUPPORTED_FEATURES.iter().find(|(n, _, _)| *n == u.name) {
                None => {
                    return Err(invalid(format!(
                        "Local controller {controller} does not support this feature."
                    )))
                }
                Some((_, min, max)) if u.level < *min || u.level > *max => {
                    return Err(invalid(format!(
                        "Local controller {controller} only supports versions {min}-{max}"
                    )))
                }
                Some(_) => {}
            }
            match u.kind {
                UpgradeType::Upgrade if u.level < current => {
                    return Err(invalid(
                        "Can't downgrade the version of this feature without setting the \
                         upgrade type to either safe or unsafe downgrade."
                            .into(),
                    ))
                }
                UpgradeType::SafeDowngrade | UpgradeType::UnsafeDowngrade if u.level > current => {
                    return Err(invalid("Can't downgrade to a newer version.".into()))
                }
                _ => {}
            }
            records.push(Record::FeatureLevel {
                name: u.name.clone(),
                level: u.level,
            });
        }
        Ok(records)
    }

    /// BrokerRegistration: a new epoch for `id` (the broker starts fenced).
    pub fn register_broker(
        &self,
        id: i32,
        incarnation: Uuid,
        endpoints: Vec<Endpoint>,
        rack: Option<String>,
    ) -> Result<Vec<Record>, ResponseError> {
        if let Some(b) = self.brokers.get(&id) {
            // The same incarnation retrying is fine; another live process with our id is not.
            if b.incarnation != incarnation && !b.fenced {
                return Err(ResponseError::DuplicateBrokerRegistration);
            }
        }
        Ok(vec![Record::RegisterBroker {
            id,
            incarnation,
            endpoints,
            rack,
        }])
    }

    /// A broker that caught up on metadata is unfenced; partitions left without a leader
    /// whose ISR names it get it as leader.
    pub fn unfence_broker(&self, id: i32) -> Vec<Record> {
        let Some(b) = self.brokers.get(&id).filter(|b| b.fenced) else {
            return Vec::new();
        };
        let mut out = vec![Record::UnfenceBroker { id, epoch: b.epoch }];
        for (tid, t) in &self.topics {
            for (i, p) in t.partitions.iter().enumerate() {
                if p.leader == NO_LEADER && p.isr.contains(&id) {
                    out.push(change(*tid, i, p, None, Some(id)));
                }
            }
        }
        out
    }

    /// Fences `id` (its session expired): it leaves every ISR it is in unless it is the last
    /// member (the ISR never empties, so no unclean leader can appear), and every partition
    /// it led gets a new leader from the rest of the ISR, or none.
    pub fn fence_broker(&self, id: i32) -> Vec<Record> {
        let Some(b) = self.brokers.get(&id).filter(|b| !b.fenced) else {
            return Vec::new();
        };
        let mut out = vec![Record::FenceBroker { id, epoch: b.epoch }];
        out.extend(self.move_away_from(id, true));
        out
    }

    /// Controlled shutdown: leadership moves to other ISR members first; the broker stays in
    /// the ISR (it is caught up) until it is fenced at exit.
    pub fn shut_down_broker(&self, id: i32) -> Vec<Record> {
        let Some(b) = self.brokers.get(&id).filter(|b| !b.shutting_down) else {
            return Vec::new();
        };
        let mut out = vec![Record::BrokerShuttingDown { id, epoch: b.epoch }];
        out.extend(self.move_away_from(id, false));
        out
    }

    /// Runs several decisions as one: each sees the image as the previous ones leave it, so
    /// their partition changes name the partition epochs they will actually meet (decided
    /// all against the same image, only the first change of each partition would apply).
    pub fn in_sequence(
        &self,
        decisions: impl IntoIterator<Item = impl FnOnce(&Image) -> Vec<Record>>,
    ) -> Vec<Record> {
        let mut scratch = self.clone();
        let mut out = Vec::new();
        for decide in decisions {
            let rs = decide(&scratch);
            for r in &rs {
                scratch.apply(scratch.offset, r);
            }
            out.extend(rs);
        }
        out
    }

    /// Leaderships and ISR places still held by fenced brokers (left behind if a change
    /// lost a race): moved as fencing would have moved them.
    pub fn repair(&self) -> Vec<Record> {
        let fenced: Vec<i32> = self
            .brokers
            .values()
            .filter(|b| b.fenced)
            .map(|b| b.id)
            .collect();
        self.in_sequence(
            fenced
                .into_iter()
                .map(|id| move |img: &Image| img.move_away_from(id, true)),
        )
    }

    fn move_away_from(&self, id: i32, leave_isr: bool) -> Vec<Record> {
        let usable = |r: i32| r != id && self.eligible(r);
        let mut out = Vec::new();
        for (tid, t) in &self.topics {
            for (i, p) in t.partitions.iter().enumerate() {
                let in_isr = p.isr.contains(&id);
                if p.leader != id && !(leave_isr && in_isr) {
                    continue;
                }
                let isr = if leave_isr && in_isr && p.isr.len() > 1 {
                    Some(
                        p.isr
                            .iter()
                            .copied()
                            .filter(|r| *r != id)
                            .collect::<Vec<_>>(),
                    )
                } else {
                    None
                };
                let leader = if p.leader == id {
                    let candidates = isr.as_ref().unwrap_or(&p.isr);
                    Some(
                        p.replicas
                            .iter()
                            .copied()
                            .find(|r| candidates.contains(r) && usable(*r))
                            .unwrap_or(NO_LEADER),
                    )
                } else {
                    None
                };
                if isr.is_some() || leader.is_some() {
                    out.push(change(*tid, i, p, isr, leader));
                }
            }
        }
        out
    }

    /// CreateTopics: `partitions` partitions of `rf` replicas each on distinct eligible
    /// brokers, round-robin from `start` (Kafka picks it at random) so leaders spread.
    pub fn create_topic(
        &self,
        name: &str,
        id: Uuid,
        partitions: i32,
        rf: i16,
        configs: BTreeMap<String, String>,
        start: usize,
    ) -> Result<Vec<Record>, ResponseError> {
        if self.names.contains_key(name) {
            return Err(ResponseError::TopicAlreadyExists);
        }
        let live = self.eligible_ids();
        if rf < 1 || rf as usize > live.len() {
            return Err(ResponseError::InvalidReplicationFactor);
        }
        if partitions < 1 {
            return Err(ResponseError::InvalidPartitions);
        }
        let n = live.len();
        let mut out = vec![Record::Topic {
            name: name.to_string(),
            id,
            configs,
        }];
        for p in 0..partitions as usize {
            let replicas: Vec<i32> = (0..rf as usize)
                .map(|j| live[(start + p + j) % n])
                .collect();
            out.push(Record::Partition {
                topic: id,
                index: p as i32,
                leader: replicas[0],
                isr: replicas.clone(),
                replicas,
            });
        }
        Ok(out)
    }

    /// The existing topic a new topic `name` would collide with: Kafka refuses names that
    /// differ from another only in '.' versus '_' (they meet in metric names).
    pub fn name_collision(&self, name: &str) -> Option<String> {
        let folded = name.replace('.', "_");
        self.names
            .keys()
            .find(|n| n.as_str() != name && n.replace('.', "_") == folded)
            .map(|other| {
                format!(
                    "topic '{name}' collides with existing topic '{other}' ('.' and '_' are treated alike)"
                )
            })
    }

    /// CreateTopics with an explicit replica assignment (kafka-topics --replica-assignment):
    /// every named broker must be registered and each partition needs one unfenced
    /// replica, which leads (the first such in its list); the ISR is its unfenced replicas.
    pub fn create_topic_assigned(
        &self,
        name: &str,
        id: Uuid,
        assignment: &[Vec<i32>],
        configs: BTreeMap<String, String>,
    ) -> Result<Vec<Record>, (ResponseError, String)> {
        if self.names.contains_key(name) {
            return Err((
                ResponseError::TopicAlreadyExists,
                format!("topic {name} already exists"),
            ));
        }
        let mut out = vec![Record::Topic {
            name: name.to_string(),
            id,
            configs,
        }];
        for (p, replicas) in assignment.iter().enumerate() {
            out.push(self.assigned_partition(id, p as i32, replicas)?);
        }
        Ok(out)
    }

    /// One partition placed as an explicit assignment says: every named broker must be
    /// registered and one unfenced, which leads (the first such in the list); the ISR is
    /// its unfenced replicas.
    fn assigned_partition(
        &self,
        topic: Uuid,
        p: i32,
        replicas: &[i32],
    ) -> Result<Record, (ResponseError, String)> {
        let invalid = |m: String| (ResponseError::InvalidReplicaAssignment, m);
        let mut distinct = replicas.to_vec();
        distinct.sort();
        distinct.dedup();
        if replicas.is_empty() || distinct.len() != replicas.len() {
            return Err(invalid(format!(
                "partition {p} needs distinct replicas, got {replicas:?}"
            )));
        }
        if let Some(b) = replicas.iter().find(|b| !self.brokers.contains_key(b)) {
            return Err(invalid(format!(
                "the assignment of partition {p} names broker {b}, which is not registered"
            )));
        }
        let isr: Vec<i32> = replicas
            .iter()
            .copied()
            .filter(|b| self.eligible(*b))
            .collect();
        let Some(&leader) = isr.first() else {
            return Err(invalid(format!(
                "every broker in the assignment of partition {p} is fenced"
            )));
        };
        Ok(Record::Partition {
            topic,
            index: p,
            replicas: replicas.to_vec(),
            isr,
            leader,
        })
    }

    /// CreatePartitions: grows topic `name` to `count` partitions with as many replicas as
    /// its first partition has, placed round-robin from `start` like new topics, or as
    /// `assignment` says for each new partition (kafka-topics --alter --replica-assignment).
    pub fn add_partitions(
        &self,
        name: &str,
        count: i32,
        start: usize,
        assignment: Option<&[Vec<i32>]>,
    ) -> Result<Vec<Record>, (ResponseError, String)> {
        let id = *self.names.get(name).ok_or_else(|| {
            (
                ResponseError::UnknownTopicOrPartition,
                format!("unknown topic {name}"),
            )
        })?;
        let t = &self.topics[&id];
        let current = t.partitions.len() as i32;
        if count <= current {
            return Err((
                ResponseError::InvalidPartitions,
                format!("topic {name} has {current} partitions; {count} would not add any"),
            ));
        }
        let rf = t.partitions.first().map_or(1, |p| p.replicas.len());
        if let Some(a) = assignment {
            if a.len() as i32 != count - current {
                return Err((
                    ResponseError::InvalidReplicaAssignment,
                    format!(
                        "{} partitions are added but the assignment names {}",
                        count - current,
                        a.len()
                    ),
                ));
            }
            if let Some(r) = a.iter().find(|r| r.len() != rf) {
                return Err((
                    ResponseError::InvalidReplicaAssignment,
                    format!(
                        "the assignment {r:?} has {} replicas; the topic's partitions have {rf}",
                        r.len()
                    ),
                ));
            }
            return (current..count)
                .zip(a)
                .map(|(p, r)| self.assigned_partition(id, p, r))
                .collect();
        }
        let live = self.eligible_ids();
        if rf > live.len() {
            return Err((
                ResponseError::InvalidReplicationFactor,
                format!(
                    "the topic's replication factor {rf} is larger than the {} available brokers",
                    live.len()
                ),
            ));
        }
        Ok((current..count)
            .map(|p| {
                let replicas: Vec<i32> = (0..rf)
                    .map(|j| live[(start + p as usize + j) % live.len()])
                    .collect();
                Record::Partition {
                    topic: id,
                    index: p,
                    leader: replicas[0],
                    isr: replicas.clone(),
                    replicas,
                }
            })
            .collect())
    }

    /// AlterPartition from a leader: checked like Kafka's controller, in its order.
    pub fn alter_partition(&self, req: &AlterIsr) -> Result<Vec<Record>, ResponseError> {
        match self.brokers.get(&req.broker) {
            Some(b) if b.epoch == req.broker_epoch => {}
            _ => return Err(ResponseError::StaleBrokerEpoch),
        }
        let p = self
            .partition(req.topic, req.index)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        if p.leader != req.broker {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        if req.leader_epoch != p.leader_epoch {
            return Err(ResponseError::FencedLeaderEpoch);
        }
        if req.partition_epoch != p.partition_epoch {
            return Err(ResponseError::InvalidUpdateVersion);
        }
        let valid = req.isr.contains(&req.broker)
            && req
                .isr
                .iter()
                .all(|r| p.replicas.contains(r) && (p.isr.contains(r) || self.eligible(*r)));
        if !valid {
            return Err(ResponseError::IneligibleReplica);
        }
        Ok(vec![self.settle(
            req.topic,
            req.index,
            p,
            p.replicas.clone(),
            req.isr.clone(),
            p.adding.clone(),
            p.removing.clone(),
        )])
    }

    /// AlterPartitionReassignments for one partition (KIP-455, as Kafka's controller does
    /// it). A target grows the replicas to target + leaving ones with the ISR unchanged; the
    /// leader's AlterPartition that brings the last joining replica into the ISR completes
    /// it (see [`Image::settle`]), at once if nothing joins. A new target replaces an
    /// ongoing one. `None` cancels: back to the replicas without the joining ones, refused
    /// if none of those is in the ISR.
    pub fn reassign(
        &self,
        topic: &str,
        index: i32,
        target: Option<&[i32]>,
        allow_rf_change: bool,
    ) -> Result<Vec<Record>, (ResponseError, String)> {
        let unknown = || {
            (
                ResponseError::UnknownTopicOrPartition,
                format!("unknown partition {topic}-{index}"),
            )
        };
        let id = *self.names.get(topic).ok_or_else(unknown)?;
        let p = self.partition(id, index).ok_or_else(unknown)?;
        let original: Vec<i32> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| !p.adding.contains(r))
            .collect();
        let Some(target) = target else {
            if !p.reassigning() {
                return Err((
                    ResponseError::NoReassignmentInProgress,
                    format!("no reassignment of {topic}-{index} is in progress"),
                ));
            }
            if !p.isr.iter().any(|r| original.contains(r)) {
                return Err((
                    ResponseError::InvalidReplicaAssignment,
                    format!(
                        "cannot cancel the reassignment of {topic}-{index}: none of the replicas it started from ({original:?}) is in the ISR {:?}",
                        p.isr
                    ),
                ));
            }
            return Ok(vec![self.settle(
                id,
                index,
                p,
                p.replicas.clone(),
                p.isr.clone(),
                Vec::new(),
                p.adding.clone(),
            )]);
        };
        let invalid = |m: String| (ResponseError::InvalidReplicaAssignment, m);
        if target.is_empty() {
            return Err(invalid(format!(
                "the reassignment of {topic}-{index} names no replicas"
            )));
        }
        for (i, b) in target.iter().enumerate() {
            if target[..i].contains(b) {
                return Err(invalid(format!(
                    "the reassignment of {topic}-{index} names broker {b} more than once"
                )));
            }
            if !self.brokers.contains_key(b) {
                return Err(invalid(format!(
                    "the reassignment of {topic}-{index} names broker {b}, which is not registered"
                )));
            }
        }
        if !allow_rf_change && target.len() != original.len() {
            return Err((
                ResponseError::InvalidReplicationFactor,
                format!(
                    "the replication factor of {topic}-{index} would change from {} to {}, and allowReplicationFactorChange is false",
                    original.len(),
                    target.len()
                ),
            ));
        }
        if target == p.replicas.as_slice() && !p.reassigning() {
            return Ok(Vec::new());
        }
        // Replicas still joining from an ongoing reassignment keep joining.
        let adding: Vec<i32> = target
            .iter()
            .copied()
            .filter(|r| !p.replicas.contains(r) || p.adding.contains(r))
            .collect();
        let removing: Vec<i32> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| !target.contains(r))
            .collect();
        let replicas: Vec<i32> = target.iter().chain(&removing).copied().collect();
        Ok(vec![self.settle(
            id,
            index,
            p,
            replicas,
            p.isr.clone(),
            adding,
            removing,
        )])
    }

    /// The change taking `p` to `replicas`, `isr` and a reassignment adding and removing
    /// those replicas, completed in the same change once every adding replica is in the
    /// ISR and the target (the replicas not removing) keeps an ISR member: the replicas
    /// become the target, removing ones leave the ISR, and a leader that leaves hands over
    /// to the first target replica in the ISR that can lead.
    #[allow(clippy::too_many_arguments)]
    fn settle(
        &self,
        topic: Uuid,
        index: i32,
        p: &PartitionState,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        adding: Vec<i32>,
        removing: Vec<i32>,
    ) -> Record {
        let target: Vec<i32> = replicas
            .iter()
            .copied()
            .filter(|r| !removing.contains(r))
            .collect();
        let target_isr: Vec<i32> = isr.iter().copied().filter(|r| target.contains(r)).collect();
        let done = (!adding.is_empty() || !removing.is_empty())
            && adding.iter().all(|r| isr.contains(r))
            && !target_isr.is_empty();
        let (replicas, isr, adding, removing) = if done {
            (target, target_isr, Vec::new(), Vec::new())
        } else {
            (replicas, isr, adding, removing)
        };
        let leader = if p.leader != NO_LEADER && isr.contains(&p.leader) {
            p.leader
        } else {
            replicas
                .iter()
                .copied()
                .find(|r| isr.contains(r) && self.eligible(*r))
                .unwrap_or(NO_LEADER)
        };
        let reassignment = (adding, removing);
        Record::PartitionChange {
            topic,
            index,
            partition_epoch: p.partition_epoch,
            isr: (isr != p.isr).then_some(isr),
            leader: (leader != p.leader).then_some(leader),
            replicas: (replicas != p.replicas).then_some(replicas),
            reassignment: (reassignment != (p.adding.clone(), p.removing.clone()))
                .then_some(reassignment),
        }
    }

    /// Preferred-leader election: the first replica, if it is in the ISR and eligible.
    pub fn elect_preferred(&self, topic: Uuid, index: i32) -> Result<Vec<Record>, ResponseError> {
        let p = self
            .partition(topic, index)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        let preferred = p.replicas[0];
        if p.leader == preferred {
            return Err(ResponseError::ElectionNotNeeded);
        }
        if !p.isr.contains(&preferred) || !self.eligible(preferred) {
            return Err(ResponseError::PreferredLeaderNotAvailable);
        }
        Ok(vec![change(
            topic,
            index as usize,
            p,
            None,
            Some(preferred),
        )])
    }

    /// Unclean leader election: a partition without a leader whose ISR has no live member
    /// gets the first live replica as leader and sole ISR member, and what only the old
    /// ISR held is lost. Kafka does it where `unclean.leader.election.enable` allows, and
    /// for ElectLeaders with the UNCLEAN type whatever the config.
    pub fn elect_unclean(&self, topic: Uuid, index: i32) -> Result<Vec<Record>, ResponseError> {
        let p = self
            .partition(topic, index)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        if p.leader != NO_LEADER {
            return Err(ResponseError::ElectionNotNeeded);
        }
        // A live ISR member (clean) would be elected by unfencing; should one be here, it goes first.
        let leader = p
            .isr
            .iter()
            .chain(&p.replicas)
            .copied()
            .find(|r| self.eligible(*r))
            .ok_or(ResponseError::EligibleLeadersNotAvailable)?;
        Ok(vec![change(
            topic,
            index as usize,
            p,
            Some(vec![leader]),
            Some(leader),
        )])
    }

    /// Unclean elections for every leaderless partition of the topics `allowed` says may
    /// have one, where a live replica exists.
    pub fn unclean_elections(&self, allowed: impl Fn(&TopicState) -> bool) -> Vec<Record> {
        self.topics
            .values()
            .filter(|t| allowed(t))
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.leader == NO_LEADER)
                    .filter_map(|(i, _)| self.elect_unclean(t.id, i as i32).ok())
                    .flatten()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Kafka's auto leader rebalance: for every broker whose share of the partitions it
    /// prefers (first replica) but does not lead is above `percent`, preferred elections
    /// for those partitions where it is live and in the ISR.
    pub fn rebalance_leaders(&self, percent: u32) -> Vec<Record> {
        let mut per: BTreeMap<i32, (usize, Vec<(Uuid, i32)>)> = BTreeMap::new();
        for t in self.topics.values() {
            for (i, p) in t.partitions.iter().enumerate() {
                let Some(&preferred) = p.replicas.first() else {
                    continue;
                };
                let e = per.entry(preferred).or_default();
                e.0 += 1;
                if p.leader != preferred {
                    e.1.push((t.id, i as i32));
                }
            }
        }
        per.into_values()
            .filter(|(total, off)| off.len() * 100 > *total * percent as usize)
            .flat_map(|(_, off)| off)
            .filter_map(|(t, i)| self.elect_preferred(t, i).ok())
            .flatten()
            .collect()
    }

    pub fn delete_topic(&self, name: &str) -> Result<Vec<Record>, ResponseError> {
        let id = self
            .names
            .get(name)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        Ok(vec![Record::RemoveTopic { id: *id }])
    }

    /// AlterConfigs / IncrementalAlterConfigs on a topic: its new overrides, whole.
    pub fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<Vec<Record>, ResponseError> {
        let id = *self
            .names
            .get(name)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        Ok(vec![Record::TopicConfigs { id, configs }])
    }

    /// AlterClientQuotas, as Kafka's ClientQuotaControlManager decides it
    /// ([`quotas::alter`]); with `validate_only`, the answers alone.
    pub fn alter_client_quotas(
        &self,
        alterations: &[quotas::Alteration],
        validate_only: bool,
    ) -> (Vec<quotas::AlterResult>, Vec<Record>) {
        let (results, changes) = quotas::alter(&self.client_quotas, alterations);
        let records = match validate_only {
            true => Vec::new(),
            false => changes
                .into_iter()
                .map(|(entity, key, value)| Record::ClientQuota { entity, key, value })
                .collect(),
        };
        (results, records)
    }

    /// AlterUserScramCredentials, as Kafka's ScramControlManager decides it: a user may
    /// appear once in a request (else DUPLICATE_RESOURCE for that user), needs a name and a
    /// known mechanism, 4096 to 16384 iterations, and a deletion needs the credential to
    /// exist. Each user's answer stands alone; the records of the good ones are returned.
    pub fn alter_scram(
        &self,
        deletions: Vec<(String, i8)>,
        upsertions: Vec<ScramUpsertion>,
    ) -> (Vec<ScramResult>, Vec<Record>) {
        use crate::security::scram::{Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};
        let mut errors: BTreeMap<String, (ResponseError, &str)> = BTreeMap::new();
        let mut deletes: BTreeMap<String, Mechanism> = BTreeMap::new();
        let mut upserts: BTreeMap<String, (Mechanism, ScramUpsertion)> = BTreeMap::new();
        let duplicate = (
            ResponseError::DuplicateResource,
            "A user credential cannot be altered twice in the same request",
        );
        let check = |user: &str, mechanism: i8| {
            if user.is_empty() {
                return Err((
                    ResponseError::UnacceptableCredential,
                    "Username must not be empty",
                ));
            }
            Mechanism::from_wire(mechanism).ok_or((
                ResponseError::UnsupportedSaslMechanism,
                "Unknown SCRAM mechanism",
            ))
        };
        for (user, mechanism) in deletions {
            if errors.contains_key(&user) {
                continue;
            }
            if deletes.remove(&user).is_some() {
                errors.insert(user, duplicate);
                continue;
            }
            let checked = check(&user, mechanism).and_then(|m| {
                match self
                    .scram
                    .get(&user)
                    .is_some_and(|c| c.contains_key(m.name()))
                {
                    true => Ok(m),
                    false => Err((
                        ResponseError::ResourceNotFound,
                        "Attempt to delete a user credential that does not exist",
                    )),
                }
            });
            match checked {
                Ok(m) => {
                    deletes.insert(user, m);
                }
                Err(e) => {
                    errors.insert(user, e);
                }
            }
        }
        for u in upsertions {
            if errors.contains_key(&u.user) {
                continue;
            }
            if deletes.remove(&u.user).is_some() || upserts.remove(&u.user).is_some() {
                errors.insert(u.user, duplicate);
                continue;
            }
            let checked = check(&u.user, u.mechanism).and_then(|m| match u.iterations {
                i if i < MIN_ITERATIONS => {
                    Err((ResponseError::UnacceptableCredential, "Too few iterations"))
                }
                i if i > MAX_ITERATIONS => {
                    Err((ResponseError::UnacceptableCredential, "Too many iterations"))
                }
                _ => Ok(m),
            });
            match checked {
                Ok(m) => {
                    upserts.insert(u.user.clone(), (m, u));
                }
                Err(e) => {
                    errors.insert(u.user, e);
                }
            }
        }
        let ok = |user: &str| ScramResult {
            user: user.to_string(),
            error: 0,
            message: None,
        };
        let mut results = Vec::new();
        let mut records = Vec::new();
        for (user, m) in deletes {
            results.push(ok(&user));
            records.push(Record::RemoveScramCredential {
                user,
                mechanism: m.name().to_string(),
            });
        }
        for (user, (m, u)) in upserts {
            results.push(ok(&user));
            records.push(Record::ScramCredential {
                user,
                mechanism: m.name().to_string(),
                credential: m.credential(&u.salt, &u.salted_password, u.iterations),
            });
        }
        results.extend(errors.into_iter().map(|(user, (e, message))| ScramResult {
            user,
            error: e.code(),
            message: Some(message.to_string()),
        }));
        (results, records)
    }

    /// CreateAcls, as Kafka's AclControlManager decides it: each binding stands alone; an
    /// invalid one gets its reason (INVALID_REQUEST), one that exists already succeeds
    /// without a new record.
    pub fn create_acls(&self, bindings: Vec<Binding>) -> (Vec<Option<String>>, Vec<Record>) {
        let mut known: std::collections::BTreeSet<&Binding> = self.acls.values().collect();
        let mut results = Vec::with_capacity(bindings.len());
        let mut records = Vec::new();
        for b in &bindings {
            if let Some(why) = b.invalid() {
                results.push(Some(why));
                continue;
            }
            if known.insert(b) {
                records.push(Record::Acl {
                    id: Uuid::new_v4(),
                    binding: b.clone(),
                });
            }
            results.push(None);
        }
        (results, records)
    }

    /// DeleteAcls: for each filter, the bindings it removes (or why it is refused); a
    /// binding two filters match is removed once.
    pub fn delete_acls(
        &self,
        filters: Vec<Filter>,
    ) -> (Vec<Result<Vec<Binding>, String>>, Vec<Record>) {
        let mut removed = std::collections::BTreeSet::new();
        let mut records = Vec::new();
        let results = filters
            .iter()
            .map(|f| {
                if let Some(why) = f.invalid() {
                    return Err(why);
                }
                let hits: Vec<Binding> = self
                    .acls
                    .iter()
                    .filter(|(_, b)| f.matches(b))
                    .map(|(id, b)| {
                        if removed.insert(*id) {
                            records.push(Record::RemoveAcl { id: *id });
                        }
                        b.clone()
                    })
                    .collect();
                Ok(hits)
            })
            .collect();
        (results, records)
    }

    /// IncrementalAlterConfigs on a group: its new configs, whole (a group need not exist
    /// to have configs, as in Kafka).
    pub fn set_group_configs(&self, group: &str, configs: BTreeMap<String, String>) -> Vec<Record> {
        vec![Record::GroupConfigs {
            group: group.to_string(),
            configs,
        }]
    }
}

fn change(
    topic: Uuid,
    index: usize,
    p: &PartitionState,
    isr: Option<Vec<i32>>,
    leader: Option<i32>,
) -> Record {
    Record::PartitionChange {
        topic,
        index: index as i32,
        partition_epoch: p.partition_epoch,
        isr,
        leader,
        replicas: None,
        reassignment: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scram_credentials_as_kafkas_controller_decides_them() {
        use crate::security::scram::Mechanism;
        let up = |user: &str, mechanism: i8, iterations: i32| ScramUpsertion {
            user: user.into(),
            mechanism,
            iterations,
            salt: b"salt".to_vec(),
            salted_password: b"salted".to_vec(),
        };
        let mut image = Image::default();
        let codes = |r: &[ScramResult]| {
            r.iter()
                .map(|r| (r.user.clone(), r.error))
                .collect::<BTreeMap<_, _>>()
        };
        let (results, records) = image.alter_scram(
            vec![("ghost".into(), 1)],
            vec![
                up("alice", 1, 8192),
                up("bob", 2, 4096),
                up("bob", 1, 4096),
                up("", 1, 4096),
                up("carol", 9, 4096),
                up("dave", 1, 100),
                up("erin", 1, 20000),
            ],
        );
        assert_eq!(
            codes(&results),
            BTreeMap::from([
                ("ghost".to_string(), ResponseError::ResourceNotFound.code()),
                ("alice".to_string(), 0),
                ("bob".to_string(), ResponseError::DuplicateResource.code()),
                (String::new(), ResponseError::UnacceptableCredential.code()),
                (
                    "carol".to_string(),
                    ResponseError::UnsupportedSaslMechanism.code()
                ),
                (
                    "dave".to_string(),
                    ResponseError::UnacceptableCredential.code()
                ),
                (
                    "erin".to_string(),
                    ResponseError::UnacceptableCredential.code()
                ),
            ])
        );
        assert_eq!(records.len(), 1, "only alice's credential is written");
        for r in &records {
            image.apply(1, r);
        }
        let stored = &image.scram["alice"]["SCRAM-SHA-256"];
        assert_eq!(stored.iterations, 8192);
        // What the controller keeps is what a login checks against, never the password.
        assert_eq!(
            stored,
            &Mechanism::Sha256.credential(b"salt", b"salted", 8192)
        );
        // Deleting it, then the user is gone.
        let (results, records) = image.alter_scram(vec![("alice".into(), 1)], Vec::new());
        assert_eq!(codes(&results)["alice"], 0);
        for r in &records {
            image.apply(2, r);
        }
        assert!(image.scram.is_empty());
    }

    #[test]
    fn feature_levels_are_finalized_and_removed_at_level_zero() {
        let mut log = Log::new();
        assert_eq!(log.image.feature(TRANSACTION_VERSION), 0);
        assert_eq!(log.image.features_epoch, -1);
        log.commit(vec![Record::ClusterId { id: "c".into() }]);
        log.commit(vec![Record::FeatureLevel {
            name: TRANSACTION_VERSION.into(),
            level: 2,
        }]);
        assert_eq!(log.image.feature(TRANSACTION_VERSION), 2);
        assert_eq!(log.image.features_epoch, 1);
        log.commit(vec![Record::FeatureLevel {
            name: TRANSACTION_VERSION.into(),
            level: 0,
        }]);
        assert_eq!(log.image.feature(TRANSACTION_VERSION), 0);
        assert!(log.image.features.is_empty());
        assert_eq!(log.image.features_epoch, 2);
        // An image written before features existed reads back without any.
        let mut old = serde_json::to_value(Image::new()).unwrap();
        old.as_object_mut().unwrap().remove("features");
        old.as_object_mut().unwrap().remove("features_epoch");
        let old: Image = serde_json::from_value(old).unwrap();
        assert!(old.features.is_empty());
        assert_eq!(old.features_epoch, -1);
    }

    #[test]
    fn update_features_moves_levels_as_kafka_allows() {
        let mut log = Log::new();
        let tv = |level, kind| FeatureUpdate {
            name: TRANSACTION_VERSION.into(),
            level,
            kind,
        };
        let invalid = |r: Result<Vec<Record>, (ResponseError, String)>, why: &str| {
            let (e, msg) = r.unwrap_err();
            assert_eq!(e, ResponseError::InvalidUpdateVersion);
            assert!(msg.contains(why), "{msg}");
        };
        // An upgraded cluster (no level yet) moves to 2.
        let rs = log
            .image
            .update_features(&[tv(2, UpgradeType::Upgrade)], 1)
            .unwrap();
        log.commit(rs);
        assert_eq!(log.image.feature(TRANSACTION_VERSION), 2);
        // Down only when asked as a downgrade; up only as an upgrade.
        invalid(
            log.image.update_features(&[tv(1, UpgradeType::Upgrade)], 1),
            "without setting the upgrade type",
        );
        let rs = log
            .image
            .update_features(&[tv(0, UpgradeType::SafeDowngrade)], 1)
            .unwrap();
        log.commit(rs);
        assert_eq!(log.image.feature(TRANSACTION_VERSION), 0);
        invalid(
            log.image
                .update_features(&[tv(1, UpgradeType::UnsafeDowngrade)], 1),
            "newer version",
        );
        // Levels and features this release does not have; nothing is written for any
        // update when one is refused.
        invalid(
            log.image.update_features(&[tv(3, UpgradeType::Upgrade)], 1),
            "The update failed for all features since the following feature had an error: \
             Invalid update version 3 for feature transaction.version. Local controller 1 only \
             supports versions 0-2",
        );
        invalid(
            log.image
                .update_features(&[tv(-1, UpgradeType::Upgrade)], 1),
            "less than 0",
        );
        invalid(
            log.image.update_features(
                &[
                    tv(1, UpgradeType::Upgrade),
                    FeatureUpdate {
                        name: "metadata.version".into(),
                        level: 27,
                        kind: UpgradeType::Upgrade,
                    },
                ],
                1,
            ),
            "does not support this feature",
        );
        // Setting the current level again is allowed (and idempotent).
        assert_eq!(
            log.image
                .update_features(&[tv(0, UpgradeType::Upgrade)], 1)
                .unwrap()
                .len(),
            1
        );
        assert_eq!(UpgradeType::from_wire(0), None);
        assert_eq!(
            UpgradeType::from_wire(3),
            Some(UpgradeType::UnsafeDowngrade)
        );
    }

    /// A log and its image: decisions are committed in order, as the quorum would.
    struct Log {
        records: Vec<Record>,
        image: Image,
    }

    impl Log {
        fn new() -> Log {
            Log {
                records: Vec::new(),
                image: Image::new(),
            }
        }

        fn commit(&mut self, rs: Vec<Record>) {
            for r in rs {
                let offset = self.records.len() as i64;
                self.image.apply(offset, &r);
                self.records.push(r);
            }
        }

        fn with_brokers(n: i32) -> Log {
            let mut log = Log::new();
            for id in 1..=n {
                let rs = log
                    .image
                    .register_broker(id, Uuid::new_v4(), Vec::new(), None)
                    .unwrap();
                log.commit(rs);
                let rs = log.image.unfence_broker(id);
                log.commit(rs);
            }
            log
        }

        fn topic(&mut self, name: &str, partitions: i32, rf: i16) -> Uuid {
            let id = Uuid::new_v4();
            let rs = self
                .image
                .create_topic(name, id, partitions, rf, BTreeMap::new(), 0)
                .unwrap();
            self.commit(rs);
            id
        }

        fn p(&self, t: Uuid, i: i32) -> PartitionState {
            self.image.partition(t, i).unwrap().clone()
        }
    }

    #[test]
    fn topics_spread_replicas_and_leaders_over_live_brokers() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("orders", 6, 3);
        let mut leaders = BTreeMap::new();
        for i in 0..6 {
            let p = log.p(t, i);
            let mut r = p.replicas.clone();
            r.sort();
            r.dedup();
            assert_eq!(r.len(), 3, "distinct replicas");
            assert_eq!(p.isr, p.replicas);
            assert_eq!(p.leader, p.replicas[0]);
            *leaders.entry(p.leader).or_insert(0) += 1;
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
        assert_eq!(
            log.image
                .create_topic("orders", Uuid::new_v4(), 1, 1, Default::default(), 0),
            Err(ResponseError::TopicAlreadyExists)
        );
        assert_eq!(
            log.image
                .create_topic("big", Uuid::new_v4(), 1, 4, Default::default(), 0),
            Err(ResponseError::InvalidReplicationFactor)
        );
        log.topic("a.b", 1, 1);
        assert!(log.image.name_collision("a_b").is_some());
        assert!(
            log.image.name_collision("a.b").is_none(),
            "the same name is not a collision"
        );
        assert!(log.image.name_collision("a-b").is_none());
    }

    #[test]
    fn producer_id_blocks_are_unique_and_never_below_what_a_broker_had() {
        let mut log = Log::with_brokers(2);
        let epoch = |log: &Log, id: i32| log.image.brokers[&id].epoch;
        let (a, rs) = log
            .image
            .allocate_producer_ids(1, epoch(&log, 1), 0)
            .unwrap();
        log.commit(rs);
        let (b, rs) = log
            .image
            .allocate_producer_ids(2, epoch(&log, 2), 0)
            .unwrap();
        log.commit(rs);
        assert_eq!((a, b), (0, PRODUCER_ID_BLOCK));
        // A broker that reserved ids on its own before (an upgraded single node).
        let (c, rs) = log
            .image
            .allocate_producer_ids(1, epoch(&log, 1), 50_000)
            .unwrap();
        log.commit(rs);
        assert_eq!(c, 50_000);
        let (d, _) = log
            .image
            .allocate_producer_ids(2, epoch(&log, 2), 0)
            .unwrap();
        assert_eq!(d, 50_000 + PRODUCER_ID_BLOCK);
        assert_eq!(
            log.image.allocate_producer_ids(2, epoch(&log, 2) - 1, 0),
            Err(ResponseError::StaleBrokerEpoch)
        );
        assert!(log.image.allocate_producer_ids(9, 0, 0).is_err());
    }

    #[test]
    fn topic_configs_are_replaced_whole_through_the_log() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 1, 3);
        let configs = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        let rs = log.image.set_topic_configs("t", configs.clone()).unwrap();
        log.commit(rs);
        assert_eq!(log.image.topics[&t].configs, configs);
        let rs = log.image.set_topic_configs("t", BTreeMap::new()).unwrap();
        log.commit(rs);
        assert!(log.image.topics[&t].configs.is_empty());
        assert_eq!(
            log.image.set_topic_configs("nope", BTreeMap::new()),
            Err(ResponseError::UnknownTopicOrPartition)
        );
    }

    #[test]
    fn an_explicit_assignment_is_kept_and_checked() {
        let mut log = Log::with_brokers(3);
        let rs = log.image.fence_broker(3);
        log.commit(rs);
        let id = Uuid::new_v4();
        let rs = log
            .image
            .create_topic_assigned("t", id, &[vec![3, 1], vec![2, 3]], BTreeMap::new())
            .unwrap();
        log.commit(rs);
        let p0 = log.p(id, 0);
        assert_eq!((p0.replicas, p0.isr, p0.leader), (vec![3, 1], vec![1], 1));
        let p1 = log.p(id, 1);
        assert_eq!((p1.replicas, p1.isr, p1.leader), (vec![2, 3], vec![2], 2));
        let bad = |a: &[Vec<i32>]| {
            log.image
                .create_topic_assigned("u", Uuid::new_v4(), a, BTreeMap::new())
                .unwrap_err()
                .0
        };
        assert_eq!(bad(&[vec![1, 1]]), ResponseError::InvalidReplicaAssignment);
        assert_eq!(bad(&[vec![1, 9]]), ResponseError::InvalidReplicaAssignment);
        assert_eq!(bad(&[vec![3]]), ResponseError::InvalidReplicaAssignment);
        assert_eq!(bad(&[vec![]]), ResponseError::InvalidReplicaAssignment);
    }

    #[test]
    fn leaders_rebalance_back_to_preferred_replicas_above_the_imbalance() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 3, 3);
        let rs = log.image.fence_broker(1);
        log.commit(rs);
        assert!(log.image.rebalance_leaders(10).is_empty(), "1 is fenced");
        let moved: Vec<i32> = (0..3).map(|i| log.p(t, i).leader).collect();
        let rs = log.image.unfence_broker(1);
        log.commit(rs);
        let lost = (0..3)
            .filter(|i| log.p(t, *i).replicas[0] != moved[*i as usize])
            .count();
        assert_eq!(lost, 1, "broker 1 lost the one partition it prefers");
        assert!(
            log.image.rebalance_leaders(10).is_empty(),
            "1 is not back in the ISR yet"
        );
        for i in 0..3 {
            let p = log.p(t, i);
            if !p.isr.contains(&1) {
                // the leader's AlterPartition once 1 has caught up
                let mut isr = p.isr.clone();
                isr.push(1);
                log.commit(vec![change(t, i as usize, &p, Some(isr), None)]);
            }
        }
        assert!(
            log.image.rebalance_leaders(100).is_empty(),
            "1 of 1 is not above 100%"
        );
        let rs = log.image.rebalance_leaders(10);
        assert_eq!(rs.len(), 1);
        log.commit(rs);
        for i in 0..3 {
            assert_eq!(log.p(t, i).leader, log.p(t, i).replicas[0]);
        }
        assert!(log.image.rebalance_leaders(10).is_empty(), "balanced");
    }

    #[test]
    fn a_fenced_broker_cannot_be_placed() {
        let mut log = Log::with_brokers(3);
        let rs = log.image.fence_broker(2);
        log.commit(rs);
        assert_eq!(
            log.image
                .create_topic("t", Uuid::new_v4(), 1, 3, Default::default(), 0),
            Err(ResponseError::InvalidReplicationFactor)
        );
        let t = log.topic("t2", 4, 2);
        for i in 0..4 {
            assert!(!log.p(t, i).replicas.contains(&2));
        }
    }

    #[test]
    fn fencing_the_leader_elects_from_the_isr_and_bumps_epochs() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 1, 3);
        let before = log.p(t, 0);
        let old = before.leader;
        let rs = log.image.fence_broker(old);
        log.commit(rs);
        let after = log.p(t, 0);
        assert_ne!(after.leader, old);
        assert_ne!(after.leader, NO_LEADER);
        assert!(!after.isr.contains(&old));
        assert_eq!(after.leader_epoch, before.leader_epoch + 1);
        assert_eq!(after.partition_epoch, before.partition_epoch + 1);
        assert!(log.image.brokers[&old].fenced);
    }

    #[test]
    fn the_isr_never_empties_and_the_last_member_comes_back_as_leader() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 1, 3);
        let order = log.p(t, 0).replicas.clone();
        for id in &order {
            let rs = log.image.fence_broker(*id);
            log.commit(rs);
        }
        let p = log.p(t, 0);
        assert_eq!(p.leader, NO_LEADER, "offline, not unclean");
        assert_eq!(
            p.isr,
            vec![order[2]],
            "the last one standing stays in the ISR"
        );
        // A replica that left the ISR coming back does not lead (it may lack data)...
        let rs = log
            .image
            .register_broker(order[0], Uuid::new_v4(), Vec::new(), None)
            .unwrap();
        log.commit(rs);
        let rs = log.image.unfence_broker(order[0]);
        log.commit(rs);
        assert_eq!(log.p(t, 0).leader, NO_LEADER);
        // ...the last ISR member does.
        let rs = log
            .image
            .register_broker(order[2], Uuid::new_v4(), Vec::new(), None)
            .unwrap();
        log.commit(rs);
        let epoch = log.p(t, 0).leader_epoch;
        let rs = log.image.unfence_broker(order[2]);
        log.commit(rs);
        let p = log.p(t, 0);
        assert_eq!(p.leader, order[2]);
        assert_eq!(p.leader_epoch, epoch + 1);
    }

    #[test]
    fn controlled_shutdown_moves_leadership_but_keeps_the_isr() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 3, 3);
        let rs = log.image.shut_down_broker(1);
        log.commit(rs);
        for i in 0..3 {
            let p = log.p(t, i);
            assert_ne!(p.leader, 1);
            assert!(p.isr.contains(&1));
        }
        assert_eq!(
            log.image.elect_preferred(t, 0).unwrap_err(),
            if log.p(t, 0).replicas[0] == 1 {
                ResponseError::PreferredLeaderNotAvailable
            } else {
                ResponseError::ElectionNotNeeded
            }
        );
    }

    impl Log {
        /// The leader of `t`-0 asks for `isr`, as its follower tracking would.
        fn leader_asks(&mut self, t: Uuid, isr: Vec<i32>) {
            let p = self.p(t, 0);
            let req = AlterIsr {
                broker: p.leader,
                broker_epoch: self.image.brokers[&p.leader].epoch,
                topic: t,
                index: 0,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                isr,
            };
            let rs = self.image.alter_partition(&req).unwrap();
            self.commit(rs);
        }

        fn reassign(&mut self, target: Option<&[i32]>) -> Result<(), ResponseError> {
            let rs = self
                .image
                .reassign("t", 0, target, true)
                .map_err(|(e, _)| e)?;
            self.commit(rs);
            Ok(())
        }
    }

    #[test]
    fn a_move_grows_then_completes_when_the_new_replica_joins_the_isr() {
        let mut log = Log::with_brokers(4);
        let t = log.topic("t", 1, 3);
        let p = log.p(t, 0);
        assert_eq!(p.replicas, vec![1, 2, 3]);
        log.reassign(Some(&[1, 2, 4])).unwrap();
        let p = log.p(t, 0);
        assert_eq!(
            (
                p.replicas.clone(),
                p.isr.clone(),
                p.adding.clone(),
                p.removing.clone()
            ),
            (vec![1, 2, 4, 3], vec![1, 2, 3], vec![4], vec![3])
        );
        assert_eq!((p.leader, p.leader_epoch), (1, 0));
        // Replica 4 caught up: the leader's expansion completes the move in one change.
        log.leader_asks(t, vec![1, 2, 3, 4]);
        let p = log.p(t, 0);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.reassigning()),
            (vec![1, 2, 4], vec![1, 2, 4], false)
        );
        assert_eq!(p.leader, 1);
        assert_eq!(
            log.image.reassign("t", 0, None, true).unwrap_err().0,
            ResponseError::NoReassignmentInProgress
        );
    }

    #[test]
    fn a_leader_moved_away_hands_over_to_the_target_at_completion() {
        let mut log = Log::with_brokers(4);
        let t = log.topic("t", 1, 3);
        log.reassign(Some(&[4, 2, 3])).unwrap();
        // An ISR shrink meanwhile does not complete it: 4 is still joining.
        log.leader_asks(t, vec![1, 2]);
        assert!(log.p(t, 0).reassigning());
        assert_eq!(log.p(t, 0).leader, 1);
        log.leader_asks(t, vec![1, 2, 4]);
        let p = log.p(t, 0);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone()),
            (vec![4, 2, 3], vec![2, 4])
        );
        assert!(!p.reassigning());
        assert_eq!(
            (p.leader, p.leader_epoch),
            (4, 1),
            "1 left: the first target replica in the ISR leads"
        );
    }

    #[test]
    fn removing_replicas_or_reordering_completes_at_once() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 1, 3);
        log.reassign(Some(&[3, 2, 1])).unwrap();
        let p = log.p(t, 0);
        assert_eq!(
            (p.replicas.clone(), p.reassigning(), p.leader),
            (vec![3, 2, 1], false, 1)
        );
        log.reassign(Some(&[2])).unwrap();
        let p = log.p(t, 0);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (vec![2], vec![2], 2)
        );
        // The same assignment again changes nothing.
        assert_eq!(log.image.reassign("t", 0, Some(&[2]), true), Ok(Vec::new()));
    }

    #[test]
    fn a_cancel_reverts_and_a_new_target_replaces_an_ongoing_one() {
        let mut log = Log::with_brokers(5);
        let t = log.topic("t", 1, 3);
        log.reassign(Some(&[1, 2, 4])).unwrap();
        log.reassign(Some(&[1, 4, 5])).unwrap();
        let p = log.p(t, 0);
        assert_eq!(
            (p.replicas.clone(), p.adding.clone(), p.removing.clone()),
            (vec![1, 4, 5, 2, 3], vec![4, 5], vec![2, 3]),
            "4 still joins; 2 and 3 leave"
        );
        log.leader_asks(t, vec![1, 2, 3, 4]);
        assert!(log.p(t, 0).reassigning(), "5 has not joined yet");
        log.reassign(None).unwrap();
        let p = log.p(t, 0);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.reassigning(), p.leader),
            (vec![1, 2, 3], vec![1, 2, 3], false, 1)
        );
    }

    #[test]
    fn bad_reassignments_are_refused_with_kafkas_errors() {
        let mut log = Log::with_brokers(3);
        log.topic("t", 1, 3);
        let err = |log: &Log, target: Option<&[i32]>, rf: bool| {
            log.image.reassign("t", 0, target, rf).unwrap_err().0
        };
        assert_eq!(
            err(&log, Some(&[1, 2, 9]), true),
            ResponseError::InvalidReplicaAssignment
        );
        assert_eq!(
            err(&log, Some(&[1, 1, 2]), true),
            ResponseError::InvalidReplicaAssignment
        );
        assert_eq!(
            err(&log, Some(&[]), true),
            ResponseError::InvalidReplicaAssignment
        );
        assert_eq!(
            err(&log, Some(&[1, 2]), false),
            ResponseError::InvalidReplicationFactor
        );
        assert_eq!(
            err(&log, None, true),
            ResponseError::NoReassignmentInProgress
        );
        assert_eq!(
            log.image.reassign("nope", 0, None, true).unwrap_err().0,
            ResponseError::UnknownTopicOrPartition
        );
        assert_eq!(
            log.image.reassign("t", 7, None, true).unwrap_err().0,
            ResponseError::UnknownTopicOrPartition
        );
    }

    #[test]
    fn a_cancel_with_no_original_replica_in_the_isr_is_refused() {
        let mut log = Log::with_brokers(6);
        let t = log.topic("t", 1, 3);
        assert_eq!(log.p(t, 0).replicas, vec![1, 2, 3]);
        log.reassign(Some(&[4, 5, 6])).unwrap();
        // 4 joins while 2 and 3 lag behind, then the leader dies: 4 leads alone.
        log.leader_asks(t, vec![1, 4]);
        let rs = log.image.fence_broker(1);
        log.commit(rs);
        let p = log.p(t, 0);
        assert_eq!((p.leader, p.isr.clone()), (4, vec![4]));
        let (e, msg) = log.image.reassign("t", 0, None, true).unwrap_err();
        assert_eq!(e, ResponseError::InvalidReplicaAssignment);
        assert!(msg.contains("ISR [4]"), "{msg}");
        assert!(log.p(t, 0).reassigning(), "still moving to [4, 5, 6]");
    }

    #[test]
    fn new_partitions_take_an_explicit_assignment_of_the_topics_size() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 1, 2);
        let err =
            |log: &Log, a: &[Vec<i32>]| log.image.add_partitions("t", 3, 0, Some(a)).unwrap_err().0;
        assert_eq!(
            err(&log, &[vec![3, 1]]),
            ResponseError::InvalidReplicaAssignment,
            "two are added"
        );
        assert_eq!(
            err(&log, &[vec![3, 1], vec![2]]),
            ResponseError::InvalidReplicaAssignment,
            "the topic has two replicas per partition"
        );
        assert_eq!(
            err(&log, &[vec![3, 1], vec![2, 9]]),
            ResponseError::InvalidReplicaAssignment
        );
        let rs = log
            .image
            .add_partitions("t", 3, 0, Some(&[vec![3, 1], vec![2, 3]]))
            .unwrap();
        log.commit(rs);
        assert_eq!(log.p(t, 1).replicas, vec![3, 1]);
        assert_eq!(
            (log.p(t, 2).replicas.clone(), log.p(t, 2).leader),
            (vec![2, 3], 2)
        );
    }

    #[test]
    fn unclean_election_takes_a_live_replica_outside_the_isr_only_where_allowed() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 1, 2);
        let p = log.p(t, 0);
        let (first, second) = (p.replicas[0], p.replicas[1]);
        // The follower dies (ISR shrinks to the leader), then the leader.
        let rs = log.image.fence_broker(second);
        log.commit(rs);
        let rs = log.image.fence_broker(first);
        log.commit(rs);
        assert_eq!(
            (log.p(t, 0).leader, log.p(t, 0).isr.clone()),
            (NO_LEADER, vec![first])
        );
        // The follower returns: not in the ISR, so a clean election cannot pick it.
        let rs = log.image.unfence_broker(second);
        log.commit(rs);
        assert_eq!(log.p(t, 0).leader, NO_LEADER);
        assert!(log.image.unclean_elections(|_| false).is_empty());
        let rs = log.image.unclean_elections(|_| true);
        log.commit(rs);
        let p = log.p(t, 0);
        assert_eq!(
            (p.leader, p.isr.clone(), p.leader_epoch),
            (second, vec![second], 2)
        );
        assert_eq!(
            log.image.elect_unclean(t, 0),
            Err(ResponseError::ElectionNotNeeded)
        );
    }

    #[test]
    fn alter_partition_is_a_compare_and_set() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 1, 3);
        let p = log.p(t, 0);
        let leader = p.leader;
        let epoch_of = |log: &Log, id: i32| log.image.brokers[&id].epoch;
        let shrink = AlterIsr {
            broker: leader,
            broker_epoch: epoch_of(&log, leader),
            topic: t,
            index: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr: vec![leader],
        };
        let rs = log.image.alter_partition(&shrink).unwrap();
        // The same decision again is stale once the first is committed.
        log.commit(rs.clone());
        assert_eq!(log.p(t, 0).isr, vec![leader]);
        assert_eq!(log.p(t, 0).partition_epoch, p.partition_epoch + 1);
        assert_eq!(
            log.p(t, 0).leader_epoch,
            p.leader_epoch,
            "ISR changes keep the leader epoch"
        );
        assert_eq!(
            log.image.alter_partition(&shrink),
            Err(ResponseError::InvalidUpdateVersion)
        );
        // A raced record with the old epoch changes nothing when applied.
        let before = log.image.clone();
        log.commit(rs);
        assert_eq!(log.image.topics, before.topics);

        let cur = log.p(t, 0);
        let follower = cur.replicas.iter().copied().find(|r| *r != leader).unwrap();
        let expand = AlterIsr {
            partition_epoch: cur.partition_epoch,
            isr: vec![leader, follower],
            ..shrink.clone()
        };
        let wrong = |f: &dyn Fn(&mut AlterIsr)| {
            let mut r = expand.clone();
            f(&mut r);
            log.image.alter_partition(&r).unwrap_err()
        };
        assert_eq!(
            wrong(&|r| r.broker_epoch -= 1),
            ResponseError::StaleBrokerEpoch
        );
        assert_eq!(
            wrong(&|r| r.leader_epoch -= 1),
            ResponseError::FencedLeaderEpoch
        );
        assert_eq!(
            wrong(&|r| r.broker = follower),
            ResponseError::StaleBrokerEpoch
        );
        assert_eq!(
            wrong(&|r| r.isr = vec![follower]),
            ResponseError::IneligibleReplica
        );
        assert_eq!(wrong(&|r| r.isr.push(99)), ResponseError::IneligibleReplica);
        assert_eq!(
            wrong(&|r| r.index = 5),
            ResponseError::UnknownTopicOrPartition
        );
        // A fenced follower cannot rejoin.
        let rs = log.image.fence_broker(follower);
        log.commit(rs);
        assert_eq!(
            log.image.alter_partition(&expand),
            Err(ResponseError::IneligibleReplica)
        );
        let rs = log
            .image
            .register_broker(follower, Uuid::new_v4(), Vec::new(), None)
            .unwrap();
        log.commit(rs);
        let rs = log.image.unfence_broker(follower);
        log.commit(rs);
        let rs = log.image.alter_partition(&expand).unwrap();
        log.commit(rs);
        assert_eq!(log.p(t, 0).isr, vec![leader, follower]);
    }

    #[test]
    fn a_second_process_cannot_take_a_live_broker_id() {
        let log = Log::with_brokers(1);
        assert_eq!(
            log.image
                .register_broker(1, Uuid::new_v4(), Vec::new(), None),
            Err(ResponseError::DuplicateBrokerRegistration)
        );
        let same = log.image.brokers[&1].incarnation;
        assert!(log.image.register_broker(1, same, Vec::new(), None).is_ok());
    }

    #[test]
    fn replaying_the_log_rebuilds_the_same_image_and_epochs_only_grow() {
        let mut log = Log::with_brokers(3);
        let t = log.topic("t", 4, 3);
        let mut last = BTreeMap::new();
        for round in 0..6 {
            let victim = 1 + round % 3;
            let rs = log.image.fence_broker(victim);
            log.commit(rs);
            let rs = log
                .image
                .register_broker(victim, Uuid::new_v4(), Vec::new(), None)
                .unwrap();
            log.commit(rs);
            let rs = log.image.unfence_broker(victim);
            log.commit(rs);
            for i in 0..4 {
                let p = log.p(t, i);
                let (le, pe) = last.get(&i).copied().unwrap_or((0, 0));
                assert!(p.leader_epoch >= le && p.partition_epoch >= pe);
                last.insert(i, (p.leader_epoch, p.partition_epoch));
            }
        }
        let mut replay = Image::new();
        for (o, r) in log.records.iter().enumerate() {
            let json = serde_json::to_vec(r).unwrap();
            replay.apply(o as i64, &serde_json::from_slice(&json).unwrap());
        }
        assert_eq!(replay, log.image);
        let rs = log.image.delete_topic("t").unwrap();
        log.commit(rs);
        assert!(log.image.topics.is_empty() && log.image.names.is_empty());
    }
}
