//! A voter: the Raft node over `controller.quorum.voters` on the controller listener, and,
//! while it is the Raft leader, the active controller: it answers brokers' requests with the
//! decisions of [`super::metadata`], keeps broker sessions ([`super::sessions`]) and fences
//! brokers whose session ended. Other voters answer brokers with the leader's id.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Raft, ServerState};
use tokio::net::TcpListener;
use tokio::sync::{watch, Mutex};
use tokio::time::Instant;
use uuid::Uuid;

use super::metadata::{AlterIsr, Image, Record};
use super::network::{self, BrokerHandler, Network};
use super::raft::{open_db, LogStore, StateMachine, TypeConfig};
use super::rpc::{BrokerReply, BrokerRequest, QuorumState};
use super::sessions::{Heartbeat, Sessions};
use crate::config::Config;

/// Where the quorum keeps its log, under the first log dir (Kafka's name for the topic).
pub const METADATA_DIR: &str = "__cluster_metadata";

pub struct ControllerNode {
    id: i32,
    /// What the first active controller writes to an empty metadata log: the cluster id,
    /// and the topics a data dir of an earlier single-node release already holds.
    seed: std::sync::Mutex<Option<Seed>>,
    raft: Raft<TypeConfig>,
    image: watch::Receiver<Arc<Image>>,
    /// Decisions run one at a time against the image their predecessor left.
    active: Mutex<Active>,
    stop: watch::Sender<bool>,
    /// `auto.leader.rebalance.enable`: (check interval, imbalance percentage per broker).
    rebalance: Option<(Duration, u32)>,
    /// The broker default of `unclean.leader.election.enable` (topics may override it).
    unclean_default: bool,
    /// Unclean elections this node decided as the active controller.
    unclean_elections: AtomicU64,
    /// How brokers' requests reach the other voters on the controller listener.
    pub(crate) dial: Arc<crate::dial::Dialer>,
}

/// The first records of a new metadata log (see [`ControllerNode::start`]).
pub struct Seed {
    pub cluster_id: String,
    /// Topics and partitions to carry over, as records.
    pub records: Vec<Record>,
}

struct Active {
    sessions: Sessions,
    /// The Raft term this node last took over in (sessions restart then).
    term: Option<u64>,
    /// Round-robin start for replica placement.
    next_start: usize,
}

impl ControllerNode {
    /// Opens the quorum's storage, joins the quorum and starts serving. Without
    /// `controller.quorum.voters` this node is the quorum's one voter (Kafka's combined mode
    /// with a single controller) and needs no `listener`; with voters it listens for the
    /// others on `listener`, and every voter offers the same initial membership when its
    /// log is empty, so the quorum forms whichever voters start first. The listener speaks
    /// TLS with `tls`, and logs its SASL logins in `metrics`.
    pub async fn start(
        config: &Config,
        listener: Option<TcpListener>,
        seed: Seed,
        tls: Option<crate::tls::Mutual>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> anyhow::Result<Arc<Self>> {
        let dir = config.log_dirs[0].join(METADATA_DIR);
        let db = open_db(Path::new(&dir))
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", dir.display()))?;
        let sm = StateMachine::open(db.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let image = sm.subscribe();
        let raft_config = openraft::Config {
            cluster_name: "cairn".into(),
            heartbeat_interval: 150,
            election_timeout_min: 1000,
            election_timeout_max: 2000,
            ..Default::default()
        };
        let voters: Vec<(u64, String)> = if config.cluster.voters.is_empty() {
            vec![(config.node_id as u64, String::new())]
        } else {
            config
                .cluster
                .voters
                .iter()
                .map(|v| (v.id as u64, format!("{}:{}", v.host, v.port)))
                .collect()
        };
        let dial = Arc::new(crate::dial::Dialer::controller(
            config,
            tls.as_ref().map(|t| t.connector.clone()),
        ));
        let network = Network {
            addrs: voters
                .iter()
                .filter(|(id, _)| *id != config.node_id as u64)
                .cloned()
                .collect(),
            dial: dial.clone(),
        };
        let raft = Raft::new(
            config.node_id as u64,
            Arc::new(raft_config.validate()?),
            network,
            LogStore::new(db),
            sm,
        )
        .await?;
        let (stop, stop_rx) = watch::channel(false);
        let node = Arc::new(ControllerNode {
            id: config.node_id,
            seed: std::sync::Mutex::new(Some(seed)),
            raft: raft.clone(),
            image,
            active: Mutex::new(Active {
                sessions: Sessions::new(Duration::from_millis(
                    config.cluster.broker_session_timeout_ms,
                )),
                term: None,
                next_start: config.node_id.unsigned_abs() as usize,
            }),
            stop,
            rebalance: config.cluster.auto_leader_rebalance,
            unclean_default: config.cluster.unclean_leader_election_enable,
            unclean_elections: AtomicU64::new(0),
            dial,
        });
        if let Some(listener) = listener {
            let handler: BrokerHandler = {
                let node = node.clone();
                Arc::new(move |req| {
                    let node = node.clone();
                    Box::pin(async move { node.handle(req).await })
                })
            };
            let gate = config.controller_sasl.as_ref().map(|sasl| {
                let listener = config
                    .cluster
                    .controller_listeners
                    .first()
                    .map(|l| l.name.clone())
                    .unwrap_or_default();
                metrics.listener_bound(&listener);
                Arc::new(super::login::Gate {
                    listener,
                    accepted: sasl.accepted.clone(),
                    metrics: metrics.clone(),
                })
            });
            tokio::spawn(network::serve(
                listener,
                tls.map(|t| t.acceptor),
                gate,
                raft.clone(),
                Some(handler),
                stop_rx.clone(),
            ));
        }
        // Voters offer the membership one after another (by their place in the list), so
        // usually the first forms the quorum and the others join it instead of racing it.
        let rank = voters
            .iter()
            .position(|(id, _)| *id == config.node_id as u64)
            .unwrap_or(0);
        let members_len = voters.len();
        let members: BTreeMap<u64, BasicNode> = voters
            .into_iter()
            .map(|(id, addr)| (id, BasicNode { addr }))
            .collect();
        let offer = async move {
            if matches!(raft.is_initialized().await, Ok(false)) {
                if let Err(e) = raft.initialize(members).await {
                    tracing::debug!(error = %e, "quorum already initialised by another voter");
                }
            }
        };
        // A sole voter elects itself at once, so the broker can register right away; with
        // others, initialising must not wait for them.
        if members_len == 1 {
            offer.await;
        } else {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(1500) * rank as u32).await;
                offer.await;
            });
        }
        tokio::spawn(node.clone().run_sessions(stop_rx));
        Ok(node)
    }

    /// Waits until a leader can be asked (this voter leading, or another voter than `not`
    /// known to lead), or `deadline` passes.
    pub async fn await_leader(&self, not: Option<i32>, deadline: Instant) {
        let me = self.id as u64;
        let mut m = self.raft.metrics();
        let _ = tokio::time::timeout_at(
            deadline,
            m.wait_for(|m| match m.current_leader {
                Some(l) if l == me => m.state == ServerState::Leader,
                Some(l) => Some(l as i32) != not,
                None => false,
            }),
        )
        .await;
    }

    pub fn id(&self) -> i32 {
        self.id
    }

    /// Whether `unclean.leader.election.enable` holds for topic `t` (its override, else the
    /// broker default).
    fn unclean_allowed(&self, t: &super::metadata::TopicState) -> bool {
        t.configs
            .get("unclean.leader.election.enable")
            .map_or(self.unclean_default, |v| v.eq_ignore_ascii_case("true"))
    }

    /// Unclean elections decided by this node while it was the active controller.
    pub fn unclean_elections(&self) -> u64 {
        self.unclean_elections.load(Ordering::Relaxed)
    }

    /// The quorum as this voter sees it while it leads (followers' positions are the
    /// entries Raft last matched on them), else `None`.
    fn quorum(&self) -> Option<QuorumState> {
        if !self.is_active() {
            return None;
        }
        let m = self.raft.metrics().borrow().clone();
        let next = |index: Option<u64>| index.map_or(0, |i| i as i64 + 1);
        let matched = m.replication.clone().unwrap_or_default();
        let voters = m
            .membership_config
            .membership()
            .voter_ids()
            .map(|id| {
                let leo = if id == self.id as u64 {
                    next(m.last_log_index)
                } else {
                    matched
                        .get(&id)
                        .map_or(-1, |l| next(l.as_ref().map(|l| l.index)))
                };
                (id as i32, leo)
            })
            .collect();
        Some(QuorumState {
            leader: self.id,
            epoch: m.current_term as i32,
            high_watermark: next(m.last_applied.map(|l| l.index)),
            voters,
        })
    }

    /// The metadata image this voter has applied, now and after every change.
    pub fn image(&self) -> watch::Receiver<Arc<Image>> {
        self.image.clone()
    }

    /// The active controller's id, as far as this voter knows.
    pub fn leader(&self) -> Option<i32> {
        self.raft
            .metrics()
            .borrow()
            .current_leader
            .map(|l| l as i32)
    }

    pub fn is_active(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.id as u64)
    }

    pub async fn shutdown(&self) {
        self.stop.send_replace(true);
        let _ = self.raft.shutdown().await;
    }

    /// Fences brokers whose session ended, while this voter is the active controller; and
    /// every `leader.imbalance.check.interval.seconds` rebalances leaders if enabled.
    async fn run_sessions(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut next_rebalance = self.rebalance.map(|(every, _)| Instant::now() + every);
        loop {
            let wait = {
                let image = self.image.borrow().clone();
                let active = self.active.lock().await;
                active
                    .sessions
                    .next_deadline(&image)
                    .map(|d| d.saturating_duration_since(Instant::now()))
                    .unwrap_or(Duration::from_millis(500))
                    .clamp(Duration::from_millis(50), Duration::from_millis(500))
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if !self.is_active() {
                continue;
            }
            let result = self
                .decide(|image, active| Ok(((), active.sessions.expire(image, Instant::now()))))
                .await;
            if let Err(reply) = result {
                tracing::debug!(?reply, "session expiry not committed");
            }
            let unclean = self
                .decide(|image, _| {
                    let rs = image.unclean_elections(|t| self.unclean_allowed(t));
                    Ok((rs.len(), rs))
                })
                .await;
            match unclean {
                Ok(0) => {}
                Ok(n) => {
                    self.unclean_elections
                        .fetch_add(n as u64, Ordering::Relaxed);
                    tracing::warn!(
                        partitions = n,
                        "unclean leader election: replicas outside the ISR lead; records only the old ISR held are lost"
                    );
                }
                Err(reply) => tracing::debug!(?reply, "unclean election not committed"),
            }
            if let (Some(at), Some((every, percent))) = (next_rebalance, self.rebalance) {
                if Instant::now() >= at {
                    next_rebalance = Some(Instant::now() + every);
                    let result = self
                        .decide(|image, _| {
                            let rs = image.rebalance_leaders(percent);
                            Ok((rs.len(), rs))
                        })
                        .await;
                    match result {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(
                            partitions = n,
                            "auto leader rebalance: preferred replicas lead again"
                        ),
                        Err(reply) => tracing::debug!(?reply, "leader rebalance not committed"),
                    }
                }
            }
        }
    }

    /// Runs one decision on the active controller: `f` sees the current image and returns
    /// its answer and the records to commit; they are committed before the answer is.
    async fn decide<T>(
        &self,
        f: impl FnOnce(&Image, &mut Active) -> Result<(T, Vec<Record>), BrokerReply>,
    ) -> Result<T, BrokerReply> {
        let not_controller = || BrokerReply::NotController {
            leader: self.leader(),
        };
        if !self.is_active() {
            return Err(not_controller());
        }
        let mut active = self.active.lock().await;
        let term = self.raft.metrics().borrow().current_term;
        if active.term != Some(term) {
            // A new term: apply everything committed before deciding anything, and give
            // every broker a full session (their heartbeats went to the old controller).
            self.raft
                .ensure_linearizable()
                .await
                .map_err(|_| not_controller())?;
            let image = self.image.borrow().clone();
            active.sessions.took_over(&image, Instant::now());
            if image.cluster_id.is_none() {
                // The first records of the log: the cluster id and what the seed carries.
                let seed = self
                    .seed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .map(|s| (s.cluster_id.clone(), s.records.clone()));
                let (id, carried) =
                    seed.unwrap_or_else(|| (super::metadata::new_cluster_id(), Vec::new()));
                if !carried.is_empty() {
                    tracing::info!(
                        records = carried.len(),
                        "carrying this data dir's topics into the new metadata log"
                    );
                }
                let mut records = vec![Record::ClusterId { id }];
                records.extend(
                    super::metadata::BOOTSTRAP_FEATURES
                        .iter()
                        .map(|(name, level)| Record::FeatureLevel {
                            name: name.to_string(),
                            level: *level,
                        }),
                );
                records.extend(carried);
                self.raft
                    .client_write(records)
                    .await
                    .map_err(|_| not_controller())?;
                *self.seed.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
            active.term = Some(term);
            tracing::info!(term, "this node is the active controller");
        }
        let image = self.image.borrow().clone();
        let (answer, records) = f(&image, &mut active)?;
        if !records.is_empty() {
            if let Err(e) = self.raft.client_write(records).await {
                tracing::info!(error = %e, "metadata write not committed");
                return Err(not_controller());
            }
        }
        Ok(answer)
    }

    /// Answers a broker's request: decides it while this voter is the active controller,
    /// else names the leader it knows.
    pub async fn handle(&self, req: BrokerRequest) -> BrokerReply {
        let err = BrokerReply::error;
        let result = match req {
            BrokerRequest::DescribeQuorum => match self.quorum() {
                Some(q) => Ok(BrokerReply::Quorum(q)),
                None => Err(BrokerReply::NotController {
                    leader: self.leader(),
                }),
            },
            BrokerRequest::Register {
                id,
                incarnation,
                endpoints,
                rack,
            } => self.register(id, incarnation, endpoints, rack).await,
            BrokerRequest::Heartbeat {
                broker,
                broker_epoch,
                metadata_offset,
                want_fence,
                want_shut_down,
            } => {
                self.heartbeat(Heartbeat {
                    broker,
                    broker_epoch,
                    metadata_offset,
                    want_fence,
                    want_shut_down,
                })
                .await
            }
            BrokerRequest::AlterPartition {
                broker,
                broker_epoch,
                topic,
                index,
                leader_epoch,
                partition_epoch,
                isr,
            } => {
                let req = AlterIsr {
                    broker,
                    broker_epoch,
                    topic,
                    index,
                    leader_epoch,
                    partition_epoch,
                    isr,
                };
                self.decide(|image, _| {
                    Ok((BrokerReply::Done, image.alter_partition(&req).map_err(err)?))
                })
                .await
            }
            BrokerRequest::CreateTopic {
                name,
                partitions,
                replication_factor,
                configs,
                validate_only,
                assignment,
            } => {
                self.create_topic(
                    name,
                    partitions,
                    replication_factor,
                    configs,
                    validate_only,
                    assignment,
                )
                .await
            }
            BrokerRequest::AllocateProducerIds {
                broker,
                broker_epoch,
                at_least,
            } => {
                self.decide(|image, _| {
                    let (start, rs) = image
                        .allocate_producer_ids(broker, broker_epoch, at_least)
                        .map_err(err)?;
                    Ok((
                        BrokerReply::ProducerIds {
                            start,
                            len: super::metadata::PRODUCER_ID_BLOCK,
                        },
                        rs,
                    ))
                })
                .await
            }
            BrokerRequest::UpdateFeatures {
                updates,
                validate_only,
            } => {
                let me = self.id;
                self.decide(|image, _| {
                    let rs = image
                        .update_features(&updates, me)
                        .map_err(BrokerReply::explained)?;
                    Ok((BrokerReply::Done, unless_validating(validate_only, rs)))
                })
                .await
            }
            BrokerRequest::SetTopicConfigs { name, configs } => {
                self.decide(|image, _| {
                    Ok((
                        BrokerReply::Done,
                        image.set_topic_configs(&name, configs).map_err(err)?,
                    ))
                })
                .await
            }
            BrokerRequest::SetGroupConfigs { group, configs } => {
                self.decide(|image, _| {
                    Ok((BrokerReply::Done, image.set_group_configs(&group, configs)))
                })
                .await
            }
            BrokerRequest::SetBrokerConfigs { broker, configs } => {
                self.decide(|_, _| {
                    Ok((
                        BrokerReply::Done,
                        vec![Record::BrokerConfigs { broker, configs }],
                    ))
                })
                .await
            }
            BrokerRequest::AlterScram {
                deletions,
                upsertions,
            } => {
                self.decide(|image, _| {
                    let (results, records) = image.alter_scram(deletions, upsertions);
                    Ok((BrokerReply::Scram(results), records))
                })
                .await
            }
            BrokerRequest::AlterClientQuotas {
                alterations,
                validate_only,
            } => {
                self.decide(|image, _| {
                    let (results, records) = image.alter_client_quotas(&alterations, validate_only);
                    Ok((BrokerReply::ClientQuotas(results), records))
                })
                .await
            }
            BrokerRequest::CreateAcls { bindings } => {
                self.decide(|image, _| {
                    let (results, records) = image.create_acls(bindings);
                    Ok((BrokerReply::AclsCreated(results), records))
                })
                .await
            }
            BrokerRequest::DeleteAcls { filters } => {
                self.decide(|image, _| {
                    let (results, records) = image.delete_acls(filters);
                    Ok((BrokerReply::AclsDeleted(results), records))
                })
                .await
            }
            BrokerRequest::DeleteTopic { name } => {
                self.decide(|image, _| {
                    Ok((BrokerReply::Done, image.delete_topic(&name).map_err(err)?))
                })
                .await
            }
            BrokerRequest::CreatePartitions {
                name,
                count,
                validate_only,
                assignment,
            } => {
                self.decide(|image, active| {
                    active.next_start = active.next_start.wrapping_add(1);
                    let rs = image
                        .add_partitions(&name, count, active.next_start, assignment.as_deref())
                        .map_err(BrokerReply::explained)?;
                    Ok((BrokerReply::Done, unless_validating(validate_only, rs)))
                })
                .await
            }
            BrokerRequest::Reassign {
                topic,
                index,
                target,
                allow_rf_change,
            } => {
                self.decide(|image, _| {
                    let rs = image
                        .reassign(&topic, index, target.as_deref(), allow_rf_change)
                        .map_err(BrokerReply::explained)?;
                    Ok((BrokerReply::Done, rs))
                })
                .await
            }
            BrokerRequest::ElectUnclean { topic, index } => {
                let result = self
                    .decide(|image, _| {
                        let id = topic_id(image, &topic)?;
                        Ok((
                            BrokerReply::Done,
                            image.elect_unclean(id, index).map_err(err)?,
                        ))
                    })
                    .await;
                if result.is_ok() {
                    self.unclean_elections.fetch_add(1, Ordering::Relaxed);
                }
                result
            }
            BrokerRequest::ElectPreferred { topic, index } => {
                self.decide(|image, _| {
                    let id = topic_id(image, &topic)?;
                    Ok((
                        BrokerReply::Done,
                        image.elect_preferred(id, index).map_err(err)?,
                    ))
                })
                .await
            }
        };
        result.unwrap_or_else(|reply| reply)
    }

    /// BrokerRegistration: the broker's epoch is the offset of its registration record.
    async fn register(
        &self,
        id: i32,
        incarnation: Uuid,
        endpoints: Vec<super::metadata::Endpoint>,
        rack: Option<String>,
    ) -> Result<BrokerReply, BrokerReply> {
        self.decide(|image, active| {
            let rs = image
                .register_broker(id, incarnation, endpoints, rack)
                .map_err(BrokerReply::error)?;
            active.sessions.registered(id, Instant::now());
            Ok(((), rs))
        })
        .await
        .map(|()| {
            let epoch = self.image.borrow().brokers.get(&id).map_or(-1, |b| b.epoch);
            BrokerReply::Registered { epoch }
        })
    }

    /// BrokerHeartbeat: keeps the session, unfences a caught-up broker, moves leaderships
    /// off one that shuts down.
    async fn heartbeat(&self, hb: Heartbeat) -> Result<BrokerReply, BrokerReply> {
        let answer = self
            .decide(|image, active| {
                let (answer, rs) = active.sessions.heartbeat(image, &hb, Instant::now());
                if let Some(e) = answer.error {
                    return Err(BrokerReply::error(e));
                }
                Ok((answer, rs))
            })
            .await?;
        // The answer renews the broker's lease on what it coordinates: only a controller a
        // quorum still follows may give it (one cut off from the other voters would keep a
        // broker cut off with it coordinating after the others moved its partitions).
        self.raft
            .ensure_linearizable()
            .await
            .map_err(|_| BrokerReply::NotController {
                leader: self.leader(),
            })?;
        Ok(BrokerReply::Heartbeat {
            is_caught_up: answer.is_caught_up,
            is_fenced: answer.is_fenced,
            should_shut_down: answer.should_shut_down,
            // read after what this heartbeat decided was committed and applied
            metadata_offset: self.image.borrow().offset,
        })
    }

    /// CreateTopics: replicas as assigned, or spread round-robin over eligible brokers.
    async fn create_topic(
        &self,
        name: String,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
        validate_only: bool,
        assignment: Option<Vec<Vec<i32>>>,
    ) -> Result<BrokerReply, BrokerReply> {
        let id = Uuid::new_v4();
        self.decide(|image, active| {
            if let Some(message) = image.name_collision(&name) {
                return Err(BrokerReply::Error {
                    code: kafka_protocol::ResponseError::InvalidTopicException.code(),
                    message: Some(message),
                });
            }
            let rs = match &assignment {
                Some(a) => image
                    .create_topic_assigned(&name, id, a, configs)
                    .map_err(BrokerReply::explained)?,
                None => {
                    active.next_start = active.next_start.wrapping_add(1);
                    image
                        .create_topic(&name, id, partitions, replication_factor, configs, active.next_start)
                        .map_err(|e| BrokerReply::Error {
                            code: e.code(),
                            message: Some(match e {
                                kafka_protocol::ResponseError::InvalidReplicationFactor => format!(
                                    "replication factor {replication_factor} is larger than the {} available brokers",
                                    image.eligible_ids().len()
                                ),
                                _ => e.to_string(),
                            }),
                        })?
                }
            };
            Ok((
                BrokerReply::TopicCreated { id },
                unless_validating(validate_only, rs),
            ))
        })
        .await
    }
}

/// The id of topic `name`, or UNKNOWN_TOPIC_OR_PARTITION.
fn topic_id(image: &Image, name: &str) -> Result<Uuid, BrokerReply> {
    image.names.get(name).copied().ok_or(BrokerReply::error(
        kafka_protocol::ResponseError::UnknownTopicOrPartition,
    ))
}

/// The records of a decision, or none when the request only validates.
fn unless_validating(validate_only: bool, records: Vec<Record>) -> Vec<Record> {
    if validate_only {
        Vec::new()
    } else {
        records
    }
}
