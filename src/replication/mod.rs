//! The broker's side of a replicated cluster (combined mode: every node is a voter and a
//! broker). Three loops per broker:
//!
//! - **membership**: BrokerRegistration, then a BrokerHeartbeat every
//!   `broker.heartbeat.interval.ms` reporting the metadata offset applied; re-registers when
//!   the controller no longer knows this incarnation; controlled shutdown at exit.
//! - **metadata**: follows the image the local voter applies, in log order: creates and removes
//!   local partition logs, and gives each partition its role (leader or follower, with the
//!   leader epoch) and the fetchers their work.
//! - **replication**: one fetcher per leader broker pulls batches with ordinary Fetch requests
//!   carrying this broker's replica id, truncating first where its log diverges from the
//!   leader's (the diverging epoch in Fetch, KIP-595's rule); the leader tracks each
//!   follower's LEO, moves the HW to the minimum LEO over the ISR, and asks the controller to
//!   shrink the ISR after `replica.lag.time.max.ms` or expand it when a follower catches up.

pub mod coordinated;
mod fetcher;
mod lease;
pub mod markers;
mod peer;
mod share_persister;

pub use fetcher::apply_answer;
pub use lease::Lease;
pub use markers::verify_remote;
pub use share_persister::SharePersister;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use crate::config::Config;
use crate::controller::client::ControllerClient;
use crate::controller::metadata::{
    Endpoint, Image, PartitionState, ScramResult, ScramUpsertion, NO_LEADER,
};
use crate::controller::quotas;
use crate::controller::rpc::{BrokerReply, BrokerRequest};
use crate::controller::service::ControllerNode;
use crate::coordinator::share_state::ShareCoordinator;
use crate::coordinator::txn_coordinator::TxnCoordinator;
use crate::coordinator::Coordinator;
use crate::error::{Error, Result};
use crate::placement::{Assignment, Progress};
use crate::security::acl::{Binding, Filter};
use crate::shutdown;
use crate::storage::MetaStore;
use crate::topics::{Catalog, Partition, OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC};

/// How long a request to the controller may take before the caller gives up.
const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a request waits for its accepted metadata change to reach the local catalog.
const LOCAL_APPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a new topic's replicas go.
pub enum Layout {
    /// The controller spreads them over live brokers.
    Spread {
        partitions: i32,
        replication_factor: i16,
    },
    /// Replicas per partition, as CreateTopics gave them (kafka-topics --replica-assignment).
    Assigned(Vec<Vec<i32>>),
}

/// What a fetcher for one leader works on.
#[derive(Clone, Default, PartialEq)]
struct FetchWork {
    addr: String,
    partitions: Vec<Followed>,
}

#[derive(Clone)]
struct Followed {
    topic: String,
    partition: Arc<Partition>,
    leader_epoch: i32,
}

impl PartialEq for Followed {
    fn eq(&self, o: &Self) -> bool {
        self.topic == o.topic
            && self.partition.index == o.partition.index
            && Arc::ptr_eq(&self.partition, &o.partition)
            && self.leader_epoch == o.leader_epoch
    }
}

/// What replication works with: the services below it, handed in by the broker that holds
/// the cluster (replication never sees the broker itself).
#[derive(Clone)]
pub struct Node {
    pub config: Arc<Config>,
    pub catalog: Arc<Catalog>,
    pub groups: Arc<Coordinator>,
    pub txns: Arc<TxnCoordinator>,
    /// The share coordinator (KIP-932): share partitions' persisted state.
    pub share_states: Arc<ShareCoordinator>,
    pub meta: Arc<dyn MetaStore>,
    pub shutdown: watch::Receiver<bool>,
    /// How this broker reaches the others (TLS and SASL as the inter-broker listener says).
    pub dial: Arc<crate::dial::Dialer>,
}

impl Node {
    pub fn id(&self) -> i32 {
        self.config.node_id
    }
}

pub struct Cluster {
    node: Node,
    pub controller: Arc<ControllerNode>,
    client: ControllerClient,
    image: watch::Receiver<Arc<Image>>,
    /// This broker's epoch (the offset of its registration), -1 until registered.
    epoch: AtomicI64,
    incarnation: Uuid,
    /// The metadata offset this broker has applied (reported in heartbeats); changes wake
    /// the requests waiting for their change to reach the local catalog.
    applied: watch::Sender<i64>,
    fetchers: Mutex<HashMap<i32, watch::Sender<FetchWork>>>,
    /// Held while the controller keeps this broker's session: what it coordinates.
    lease: Arc<Lease>,
    /// Set once controlled shutdown is done (or given up).
    shut_down: watch::Sender<bool>,
    want_shut_down: watch::Sender<bool>,
    /// The `__consumer_offsets` partitions this broker leads: the groups it coordinates.
    pub groups: Arc<coordinated::CoordinatorPartitions>,
    /// The `__transaction_state` partitions this broker leads: the transactional ids it
    /// coordinates.
    pub txns: Arc<coordinated::CoordinatorPartitions>,
    /// The `__share_group_state` partitions this broker leads: the share partitions whose
    /// state it keeps.
    pub share_states: Arc<coordinated::CoordinatorPartitions>,
}

/// Which coordinator a FindCoordinator key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorKind {
    Group,
    Transaction,
    /// A share partition's state: `group:topic-id:partition`.
    Share,
}

impl Cluster {
    /// Starts membership, metadata and ISR loops for `broker` over the local voter.
    pub fn start(node: Node, controller: Arc<ControllerNode>) -> Arc<Cluster> {
        let applied = watch::channel(-1).0;
        let lease = Arc::new(Lease::new(
            Duration::from_millis(node.config.cluster.broker_session_timeout_ms),
            applied.subscribe(),
        ));
        let groups = Arc::new(coordinated::CoordinatorPartitions::new(
            node.id(),
            OFFSETS_TOPIC,
            node.groups.clone(),
            node.meta.clone(),
            lease.clone(),
        ));
        node.groups.replicate_through(groups.clone());
        let txns = Arc::new(coordinated::CoordinatorPartitions::new(
            node.id(),
            TXN_TOPIC,
            node.txns.clone(),
            node.meta.clone(),
            lease.clone(),
        ));
        node.txns.replicate_through(txns.clone());
        let share_states = Arc::new(coordinated::CoordinatorPartitions::new(
            node.id(),
            SHARE_STATE_TOPIC,
            node.share_states.clone(),
            node.meta.clone(),
            lease.clone(),
        ));
        node.share_states.replicate_through(share_states.clone());
        let image = controller.image();
        node.txns
            .write_markers_through(Arc::new(markers::ClusterMarkers::new(node.clone(), image)));
        tokio::spawn(node.txns.clone().run());
        let cluster = Arc::new(Cluster {
            image: controller.image(),
            client: ControllerClient::new(controller.clone(), &node.config.cluster.voters),
            epoch: AtomicI64::new(-1),
            incarnation: Uuid::new_v4(),
            applied,
            lease,
            fetchers: Mutex::new(HashMap::new()),
            shut_down: watch::channel(false).0,
            want_shut_down: watch::channel(false).0,
            groups,
            txns,
            share_states,
            node,
            controller,
        });
        tokio::spawn(cluster.clone().membership());
        tokio::spawn(cluster.clone().follow_metadata());
        tokio::spawn(cluster.clone().check_isr());
        cluster
    }

    pub fn image(&self) -> Arc<Image> {
        self.image.borrow().clone()
    }

    /// Registered and unfenced in the metadata this broker applied, in this incarnation
    /// (an old incarnation's registration, live until its session ends, does not count).
    pub fn is_running(&self) -> bool {
        let image = self.image();
        let epoch = self.broker_epoch();
        image
            .brokers
            .values()
            .any(|b| b.incarnation == self.incarnation && b.epoch == epoch && !b.fenced)
    }

    /// Waits until this broker [`is_running`](Self::is_running), as Kafka's broker waits to
    /// be unfenced before it serves clients.
    pub async fn await_running(&self) {
        let mut applied = self.applied.subscribe();
        let _ = applied
            .wait_for(|a| *a >= self.image().offset && self.is_running())
            .await;
    }

    pub fn broker_epoch(&self) -> i64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Kafka's controlled shutdown: heartbeats asking to shut down until the controller has
    /// moved every leadership away (bounded by `timeout`).
    pub async fn controlled_shutdown(&self, timeout: Duration) {
        self.want_shut_down.send_replace(true);
        let mut done = self.shut_down.subscribe();
        let _ = tokio::time::timeout(timeout, done.wait_for(|d| *d)).await;
    }

    // ---- membership ---------------------------------------------------------------------

    async fn membership(self: Arc<Self>) {
        let cfg = &self.node.config;
        let interval = Duration::from_millis(cfg.cluster.broker_heartbeat_interval_ms);
        let endpoints: Vec<Endpoint> = cfg
            .advertised_listeners
            .iter()
            .map(|l| Endpoint {
                listener: l.name.clone(),
                host: l.host.clone(),
                port: l.port,
            })
            .collect();
        let mut want_shut_down = self.want_shut_down.subscribe();
        loop {
            if self.broker_epoch() < 0 {
                let req = BrokerRequest::Register {
                    id: self.node.id(),
                    incarnation: self.incarnation,
                    endpoints: endpoints.clone(),
                    rack: None,
                };
                match self.client.call(req, CONTROLLER_TIMEOUT).await {
                    Some(BrokerReply::Registered { epoch }) => {
                        tracing::info!(epoch, "registered with the controller");
                        self.epoch.store(epoch, Ordering::Release);
                        // The controller unfences a broker whose heartbeat shows it applied
                        // its own registration: wait for that (bounded by one interval)
                        // rather than heartbeat at once, be found behind, and wait a whole
                        // interval for the next try, as Kafka's broker also waits to catch
                        // up before its first heartbeat asks to be unfenced.
                        let mut applied = self.applied.subscribe();
                        let _ =
                            tokio::time::timeout(interval, applied.wait_for(|a| *a >= epoch)).await;
                        continue;
                    }
                    other => {
                        tracing::warn!(answer = ?other, "registration not accepted yet; retrying");
                        tokio::time::sleep(interval.min(Duration::from_secs(1))).await;
                        continue;
                    }
                }
            }
            let shutting_down = *want_shut_down.borrow();
            let mut applied = self.applied.subscribe();
            let req = BrokerRequest::Heartbeat {
                broker: self.node.id(),
                broker_epoch: self.broker_epoch(),
                metadata_offset: *self.applied.borrow(),
                want_fence: false,
                want_shut_down: shutting_down,
            };
            let sent = Instant::now();
            match self.client.call(req, CONTROLLER_TIMEOUT).await {
                Some(BrokerReply::Heartbeat {
                    should_shut_down,
                    is_fenced,
                    metadata_offset,
                    ..
                }) => {
                    match is_fenced {
                        true => self.lease.lost(),
                        false => self.lease.renewed(sent, metadata_offset),
                    }
                    if should_shut_down {
                        tracing::info!("controlled shutdown done: this broker leads nothing");
                        self.shut_down.send_replace(true);
                        return;
                    }
                }
                Some(BrokerReply::Error { code, .. })
                    if code == ResponseError::StaleBrokerEpoch.code()
                        || code == ResponseError::BrokerIdNotRegistered.code() =>
                {
                    tracing::warn!(
                        "the controller no longer knows this broker's epoch; registering again"
                    );
                    self.lease.lost();
                    self.epoch.store(-1, Ordering::Release);
                    continue;
                }
                other => tracing::debug!(answer = ?other, "heartbeat not answered"),
            }
            // Shutting down, the next heartbeat goes as soon as this broker has applied what
            // the last one decided (bounded): the controller answers once it leads nothing.
            tokio::select! {
                _ = tokio::time::sleep(if shutting_down { Duration::from_millis(200) } else { interval }) => {}
                _ = applied.changed(), if shutting_down => {}
                _ = want_shut_down.wait_for(|w| *w), if !shutting_down => {}
            }
        }
    }

    // ---- metadata -----------------------------------------------------------------------

    async fn follow_metadata(self: Arc<Self>) {
        let mut rx = self.image.clone();
        let mut shutdown = self.node.shutdown.clone();
        // An image without a cluster id is a log the first controller has not started yet
        // (it seeds it with what this data dir holds): applying it would drop every local
        // topic.
        tokio::select! {
            r = rx.wait_for(|i| i.cluster_id.is_some()) => if r.is_err() { return },
            _ = shutdown::requested(&mut shutdown) => return,
        }
        loop {
            let image = rx.borrow_and_update().clone();
            if let Err(e) = self.apply_image(&image).await {
                tracing::error!(error = %e, "applying cluster metadata failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            self.applied.send_replace(image.offset);
            tokio::select! {
                r = rx.changed() => if r.is_err() { return },
                _ = shutdown::requested(&mut shutdown) => return,
            }
        }
    }

    async fn apply_image(&self, image: &Image) -> Result<()> {
        let node = &self.node;
        let me = node.id();
        let dynamic = |name: &str| image.broker_configs.get(name).cloned().unwrap_or_default();
        node.catalog
            .reconfigure(dynamic(""), dynamic(&me.to_string()))
            .await;
        let mut work: BTreeMap<i32, FetchWork> = BTreeMap::new();
        for t in image.topics.values() {
            if t.partitions.is_empty() {
                continue;
            }
            let topic = node
                .catalog
                .adopt(&t.name, t.id, t.partitions.len(), &t.configs)
                .await?;
            for (i, ps) in t.partitions.iter().enumerate() {
                let p = &topic.partitions[i];
                self.apply_partition(me, image, t.id, ps, p);
                let o = p.log.offsets();
                if !ps.replicas.contains(&me) && o.log_end > o.log_start {
                    // Moved away (a reassignment completed): the data goes, as in Kafka.
                    tracing::info!(topic = %t.name, partition = i, "no longer a replica: deleting the local log");
                    p.log.truncate_to(o.log_start).await?;
                }
                if ps.leader != me && ps.leader != NO_LEADER && ps.replicas.contains(&me) {
                    let Some(addr) = endpoint(image, ps.leader, &node.config) else {
                        continue;
                    };
                    let w = work.entry(ps.leader).or_default();
                    w.addr = addr;
                    w.partitions.push(Followed {
                        topic: t.name.clone(),
                        partition: p.clone(),
                        leader_epoch: ps.leader_epoch,
                    });
                }
            }
        }
        for local in node.catalog.all() {
            if image.names.get(&local.name) != Some(&local.id) {
                node.catalog.forget(&local.name).await?;
            }
        }
        // Coordinators run only while this broker runs in this incarnation (registered,
        // caught up, unfenced). Before that its image may be an old one read back at start,
        // naming it the leader of partitions it lost while it was down, and a coordinator
        // loaded from that would act on state others have moved past: a transaction
        // coordinator re-sending the markers of a transaction long finished (Kafka's brokers
        // publish nothing before they catch up). A fenced broker's coordinators unload.
        let running = self.is_running();
        let local = |name| running.then(|| node.catalog.get(name)).flatten();
        self.groups.follow(image, local(OFFSETS_TOPIC));
        self.txns.follow(image, local(TXN_TOPIC));
        self.share_states.follow(image, local(SHARE_STATE_TOPIC));
        let mut fetchers = self.fetchers.lock().unwrap_or_else(|e| e.into_inner());
        for (leader, tx) in fetchers.iter() {
            if !work.contains_key(leader) {
                tx.send_if_modified(|w| {
                    let changed = !w.partitions.is_empty();
                    w.partitions.clear();
                    changed
                });
            }
        }
        for (leader, w) in work {
            match fetchers.get(&leader) {
                Some(tx) => {
                    tx.send_if_modified(|cur| {
                        let changed = *cur != w;
                        *cur = w;
                        changed
                    });
                }
                None => {
                    let (tx, rx) = watch::channel(w);
                    fetchers.insert(leader, tx);
                    tokio::spawn(fetcher::run(node.clone(), leader, rx));
                }
            }
        }
        Ok(())
    }

    fn apply_partition(
        &self,
        me: i32,
        image: &Image,
        topic_id: Uuid,
        ps: &PartitionState,
        p: &Partition,
    ) {
        let offline: Vec<i32> = ps
            .replicas
            .iter()
            .copied()
            .filter(|r| image.brokers.get(r).is_none_or(|b| b.fenced))
            .collect();
        {
            let mut a = p.replica.lock();
            if let Some(cur) = a.as_mut() {
                if cur.leader_epoch == ps.leader_epoch && cur.partition_epoch == ps.partition_epoch
                {
                    cur.offline = offline;
                    return;
                }
            }
            let keep = a
                .as_ref()
                .filter(|c| c.leader == me && ps.leader == me && c.leader_epoch == ps.leader_epoch)
                .map(|c| c.followers.clone());
            let now = Instant::now();
            let followers = keep.unwrap_or_else(|| {
                // A new leader gives every ISR follower a full lag time to show up (Kafka's rule).
                ps.isr
                    .iter()
                    .filter(|r| **r != me)
                    .map(|r| {
                        (
                            *r,
                            Progress {
                                leo: -1,
                                last_caught_up: now,
                                last_fetch: now,
                                leader_leo_at_last_fetch: -1,
                            },
                        )
                    })
                    .collect()
            });
            *a = Some(Assignment {
                topic_id,
                leader: ps.leader,
                leader_epoch: ps.leader_epoch,
                partition_epoch: ps.partition_epoch,
                replicas: ps.replicas.clone(),
                isr: ps.isr.clone(),
                offline,
                followers,
                alter_in_flight: false,
            });
        }
        if ps.leader == me {
            p.log.set_role(ps.leader_epoch, true, ps.isr == [me]);
            recompute_hw(me, p);
        } else {
            p.log.set_role(ps.leader_epoch, false, false);
        }
        // Wake anyone waiting on this partition (acks=all waiters re-check the leadership).
        p.log.hw_moved.notify_waiters();
        p.log.appended.notify_waiters();
    }

    // ---- the leader's side of replication -----------------------------------------------

    /// A follower fetched from `fetch_offset`: its LEO. Updates its progress, the HW, and asks
    /// the controller to add it to the ISR once it has caught up.
    pub fn follower_fetched(
        self: &Arc<Self>,
        p: &Arc<Partition>,
        follower: i32,
        fetch_offset: i64,
    ) -> Result<()> {
        let me = self.node.id();
        let leo = p.log.offsets().log_end;
        let expand = {
            let mut guard = p.replica.lock();
            let a = guard.as_mut().ok_or(Error::NotLeaderOrFollower)?;
            if a.leader != me {
                return Err(Error::NotLeaderOrFollower);
            }
            if !a.replicas.contains(&follower) {
                return Err(Error::NotLeaderOrFollower);
            }
            let now = Instant::now();
            let prev = a.followers.get(&follower).copied();
            let mut pr = prev.unwrap_or(Progress {
                leo: -1,
                last_caught_up: now - Duration::from_secs(3600),
                last_fetch: now,
                leader_leo_at_last_fetch: -1,
            });
            pr.leo = fetch_offset;
            if fetch_offset >= leo {
                pr.last_caught_up = now;
            } else if prev.is_some() && fetch_offset >= pr.leader_leo_at_last_fetch {
                pr.last_caught_up = pr.last_fetch;
            }
            pr.last_fetch = now;
            pr.leader_leo_at_last_fetch = leo;
            a.followers.insert(follower, pr);
            let hw = p.log.offsets().high_watermark;
            let epoch_start = p.log.epoch_start(a.leader_epoch);
            let caught_up = fetch_offset >= hw && fetch_offset >= epoch_start;
            // A fenced follower is not eligible yet: wait for the controller to unfence it.
            if !a.isr.contains(&follower)
                && !a.offline.contains(&follower)
                && caught_up
                && !a.alter_in_flight
            {
                a.alter_in_flight = true;
                let mut isr = a.isr.clone();
                isr.push(follower);
                Some((a.clone(), isr))
            } else {
                None
            }
        };
        recompute_hw(me, p);
        if let Some((a, isr)) = expand {
            tracing::info!(
                partition = p.index,
                follower,
                ?isr,
                "follower caught up: expanding the ISR"
            );
            tokio::spawn(self.clone().alter_isr(p.clone(), a, isr));
        }
        Ok(())
    }

    async fn alter_isr(self: Arc<Self>, p: Arc<Partition>, a: Assignment, isr: Vec<i32>) {
        let req = BrokerRequest::AlterPartition {
            broker: self.node.id(),
            broker_epoch: self.broker_epoch(),
            topic: a.topic_id,
            index: p.index,
            leader_epoch: a.leader_epoch,
            partition_epoch: a.partition_epoch,
            isr,
        };
        // Short-lived: a shrink decided while the quorum was unreachable must not land much
        // later, after the followers caught up again; the next check decides afresh.
        let timeout = Duration::from_millis(self.node.config.cluster.replica_lag_time_max_ms / 2)
            .clamp(Duration::from_secs(1), Duration::from_secs(5));
        let answer = self.client.call(req, timeout).await;
        if !matches!(answer, Some(BrokerReply::Done)) {
            tracing::info!(partition = p.index, ?answer, "ISR change not accepted");
        }
        if let Some(cur) = p.replica.lock().as_mut() {
            cur.alter_in_flight = false;
        }
    }

    /// Every half lag time: ISR followers that have not caught up within
    /// `replica.lag.time.max.ms` are dropped from the ISR, through the controller.
    async fn check_isr(self: Arc<Self>) {
        let lag = Duration::from_millis(self.node.config.cluster.replica_lag_time_max_ms);
        let mut shutdown = self.node.shutdown.clone();
        let me = self.node.id();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(lag / 2) => {}
                _ = shutdown::requested(&mut shutdown) => return,
            }
            let now = Instant::now();
            for t in self.node.catalog.all() {
                for p in &t.partitions {
                    let shrink = {
                        let mut guard = p.replica.lock();
                        let Some(a) = guard.as_mut() else { continue };
                        if a.leader != me || a.alter_in_flight {
                            continue;
                        }
                        let out: Vec<i32> = a
                            .isr
                            .iter()
                            .copied()
                            .filter(|r| *r != me)
                            .filter(|r| {
                                a.followers
                                    .get(r)
                                    .is_none_or(|f| now.duration_since(f.last_caught_up) > lag)
                            })
                            .collect();
                        if out.is_empty() {
                            None
                        } else {
                            a.alter_in_flight = true;
                            let isr: Vec<i32> =
                                a.isr.iter().copied().filter(|r| !out.contains(r)).collect();
                            tracing::info!(topic = %t.name, partition = p.index, lagging = ?out, ?isr, "shrinking the ISR");
                            Some((a.clone(), isr))
                        }
                    };
                    if let Some((a, isr)) = shrink {
                        tokio::spawn(self.clone().alter_isr(p.clone(), a, isr));
                    }
                }
            }
        }
    }

    // ---- requests clients send to any broker --------------------------------------------

    async fn ask(&self, req: BrokerRequest) -> Result<BrokerReply> {
        match self.client.call(req, CONTROLLER_TIMEOUT).await {
            None => Err(Error::ControllerUnavailable),
            Some(BrokerReply::Error { code, message }) => {
                let error =
                    ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError);
                Err(Error::Controller {
                    error,
                    message: message.unwrap_or_else(|| error.to_string()),
                })
            }
            Some(r) => Ok(r),
        }
    }

    /// Waits until the local catalog satisfies `done`, re-checking each time this broker
    /// applies more metadata, so a client's next request to this broker sees the change it
    /// just made. Bounded: a change the quorum took is applied eventually, but the client
    /// should not wait on a broker that is cut off from it.
    async fn await_applied(&self, done: impl Fn(&Catalog) -> bool) {
        let mut applied = self.applied.subscribe();
        let catalog = &self.node.catalog;
        let _ =
            tokio::time::timeout(LOCAL_APPLY_TIMEOUT, applied.wait_for(|_| done(catalog))).await;
    }

    pub async fn create_topic(
        &self,
        name: &str,
        layout: Layout,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<()> {
        let (partitions, replication_factor, assignment) = match layout {
            Layout::Spread {
                partitions,
                replication_factor,
            } => (partitions, replication_factor, None),
            Layout::Assigned(a) => (
                a.len() as i32,
                a.first().map_or(0, |r| r.len() as i16),
                Some(a),
            ),
        };
        self.ask(BrokerRequest::CreateTopic {
            name: name.to_string(),
            partitions,
            replication_factor,
            configs,
            validate_only,
            assignment,
        })
        .await?;
        if !validate_only {
            self.await_applied(|c| c.get(name).is_some()).await;
        }
        Ok(())
    }

    /// The services this broker's replication works with.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// A block of producer ids unique in the cluster, as (first, end), none below
    /// `at_least`.
    pub async fn allocate_producer_ids(&self, at_least: i64) -> Result<(i64, i64)> {
        let req = BrokerRequest::AllocateProducerIds {
            broker: self.node.id(),
            broker_epoch: self.broker_epoch(),
            at_least,
        };
        match self.ask(req).await? {
            BrokerReply::ProducerIds { start, len } => Ok((start, start + len)),
            other => Err(Error::Storage(format!(
                "unexpected answer to AllocateProducerIds: {other:?}"
            ))),
        }
    }

    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        self.ask(BrokerRequest::DeleteTopic {
            name: name.to_string(),
        })
        .await?;
        self.await_applied(|c| c.get(name).is_none()).await;
        Ok(())
    }

    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignment: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<()> {
        self.ask(BrokerRequest::CreatePartitions {
            name: name.to_string(),
            count,
            validate_only,
            assignment,
        })
        .await?;
        if !validate_only {
            self.await_applied(|c| {
                c.get(name)
                    .is_none_or(|t| t.partitions.len() as i32 >= count)
            })
            .await;
        }
        Ok(())
    }

    /// Replaces a topic's config overrides through the controller; returns once this
    /// broker has applied them (bounded), so the client's next describe sees them.
    pub async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<()> {
        self.ask(BrokerRequest::SetTopicConfigs {
            name: name.to_string(),
            configs: configs.clone(),
        })
        .await?;
        self.await_applied(|c| c.get(name).is_none_or(|t| t.overrides == configs))
            .await;
        Ok(())
    }

    /// Replaces a group's configs through the controller; returns once this broker has
    /// applied them (bounded), so the client's next describe sees them.
    pub async fn set_group_configs(
        &self,
        group: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<()> {
        self.ask(BrokerRequest::SetGroupConfigs {
            group: group.to_string(),
            configs: configs.clone(),
        })
        .await?;
        let mut image = self.image.clone();
        let done =
            |i: &Arc<Image>| i.group_configs.get(group).cloned().unwrap_or_default() == configs;
        let _ = tokio::time::timeout(LOCAL_APPLY_TIMEOUT, image.wait_for(done)).await;
        Ok(())
    }

    /// AlterUserScramCredentials through the controller; returns each user's answer once
    /// this broker has applied the accepted changes (bounded), so a login here right after
    /// uses the new credential.
    pub async fn alter_scram(
        &self,
        deletions: Vec<(String, i8)>,
        upsertions: Vec<ScramUpsertion>,
    ) -> Result<Vec<ScramResult>> {
        let wanted: Vec<(String, Option<i8>, i8)> = deletions
            .iter()
            .map(|(user, m)| (user.clone(), None, *m))
            .chain(
                upsertions
                    .iter()
                    .map(|u| (u.user.clone(), Some(u.mechanism), u.mechanism)),
            )
            .collect();
        let BrokerReply::Scram(results) = self
            .ask(BrokerRequest::AlterScram {
                deletions,
                upsertions: upsertions.clone(),
            })
            .await?
        else {
            return Err(Error::ControllerUnavailable);
        };
        // Every accepted upsertion present here, every accepted deletion gone.
        let accepted: Vec<(String, bool, &'static str)> = results
            .iter()
            .filter(|r| r.error == 0)
            .filter_map(|r| {
                let (user, upsert, m) = wanted.iter().find(|(u, ..)| *u == r.user)?;
                let name = crate::security::scram::Mechanism::from_wire(*m)?.name();
                Some((user.clone(), upsert.is_some(), name))
            })
            .collect();
        let mut image = self.image.clone();
        let done = |i: &Arc<Image>| {
            accepted.iter().all(|(user, upsert, m)| {
                i.scram.get(user).is_some_and(|c| c.contains_key(*m)) == *upsert
            })
        };
        let _ = tokio::time::timeout(LOCAL_APPLY_TIMEOUT, image.wait_for(done)).await;
        Ok(results)
    }

    /// CreateAcls through the controller; each binding's refusal, if any, once this broker
    /// has applied the accepted ones (bounded), so its next request is decided by them.
    pub async fn create_acls(&self, bindings: Vec<Binding>) -> Result<Vec<Option<String>>> {
        let BrokerReply::AclsCreated(results) = self
            .ask(BrokerRequest::CreateAcls {
                bindings: bindings.clone(),
            })
            .await?
        else {
            return Err(Error::ControllerUnavailable);
        };
        let accepted: Vec<&Binding> = bindings
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|(b, _)| b)
            .collect();
        let mut image = self.image.clone();
        let done = |i: &Arc<Image>| accepted.iter().all(|b| i.acls.values().any(|a| a == *b));
        let _ = tokio::time::timeout(LOCAL_APPLY_TIMEOUT, image.wait_for(done)).await;
        Ok(results)
    }

    /// AlterClientQuotas through the controller; each entry's answer, once this broker has
    /// applied the accepted changes (bounded), so a describe here right after shows them.
    pub async fn alter_client_quotas(
        &self,
        alterations: Vec<quotas::Alteration>,
        validate_only: bool,
    ) -> Result<Vec<quotas::AlterResult>> {
        let BrokerReply::ClientQuotas(results) = self
            .ask(BrokerRequest::AlterClientQuotas {
                alterations: alterations.clone(),
                validate_only,
            })
            .await?
        else {
            return Err(Error::ControllerUnavailable);
        };
        if validate_only {
            return Ok(results);
        }
        // Every accepted entry's values as asked, here.
        let accepted: Vec<(quotas::Entity, &quotas::Alteration)> = alterations
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.error == 0)
            .map(|(a, _)| (a.entity.iter().cloned().collect(), a))
            .collect();
        let mut image = self.image.clone();
        let done = |i: &Arc<Image>| {
            accepted.iter().all(|(entity, a)| {
                let now = i.client_quotas.get(&quotas::key(entity));
                a.ops
                    .iter()
                    .all(|(k, v)| now.and_then(|q| q.values.get(k)).map(|v| v.0) == *v)
            })
        };
        let _ = tokio::time::timeout(LOCAL_APPLY_TIMEOUT, image.wait_for(done)).await;
        Ok(results)
    }

    /// DeleteAcls through the controller; per filter the bindings removed, once this
    /// broker no longer has them (bounded).
    pub async fn delete_acls(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<Result<Vec<Binding>, String>>> {
        let BrokerReply::AclsDeleted(results) =
            self.ask(BrokerRequest::DeleteAcls { filters }).await?
        else {
            return Err(Error::ControllerUnavailable);
        };
        let gone: Vec<&Binding> = results.iter().flatten().flatten().collect();
        let mut image = self.image.clone();
        let done = |i: &Arc<Image>| !i.acls.values().any(|a| gone.contains(&a));
        let _ = tokio::time::timeout(LOCAL_APPLY_TIMEOUT, image.wait_for(done)).await;
        Ok(results)
    }

    /// Replaces the dynamic configs of broker `broker` ("" for the cluster's defaults)
    /// through the controller; returns once this broker has applied them (bounded).
    pub async fn set_broker_configs(
        &self,
        broker: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<()> {
        self.ask(BrokerRequest::SetBrokerConfigs {
            broker: broker.to_string(),
            configs: configs.clone(),
        })
        .await?;
        let mine = !broker.is_empty();
        self.await_applied(|c| {
            let layers = c.config().layers.clone();
            configs == if mine { layers.broker } else { layers.cluster }
        })
        .await;
        Ok(())
    }

    /// Sets cluster feature levels through the controller; returns once this broker's
    /// image has them (bounded), so the client's next ApiVersions here shows them.
    pub async fn update_features(
        &self,
        updates: Vec<crate::controller::metadata::FeatureUpdate>,
        validate_only: bool,
    ) -> Result<()> {
        self.ask(BrokerRequest::UpdateFeatures {
            updates: updates.clone(),
            validate_only,
        })
        .await?;
        if !validate_only {
            let mut image = self.image.clone();
            let done = |i: &Arc<Image>| updates.iter().all(|u| i.feature(&u.name) == u.level);
            let _ = tokio::time::timeout(LOCAL_APPLY_TIMEOUT, image.wait_for(done)).await;
        }
        Ok(())
    }

    /// Starts, replaces or (with `target: None`) cancels the reassignment of one partition
    /// through the controller.
    pub async fn reassign(
        &self,
        topic: &str,
        index: i32,
        target: Option<Vec<i32>>,
        allow_rf_change: bool,
    ) -> Result<()> {
        self.ask(BrokerRequest::Reassign {
            topic: topic.to_string(),
            index,
            target,
            allow_rf_change,
        })
        .await
        .map(|_| ())
    }

    /// The metadata quorum, from the active controller.
    pub async fn describe_quorum(&self) -> Result<crate::controller::rpc::QuorumState> {
        match self.ask(BrokerRequest::DescribeQuorum).await? {
            BrokerReply::Quorum(q) => Ok(q),
            other => Err(Error::Controller {
                error: ResponseError::UnknownServerError,
                message: format!("unexpected answer from the controller: {other:?}"),
            }),
        }
    }

    pub async fn elect_unclean(&self, topic: &str, index: i32) -> Result<()> {
        self.ask(BrokerRequest::ElectUnclean {
            topic: topic.to_string(),
            index,
        })
        .await
        .map(|_| ())
    }

    pub async fn elect_preferred(&self, topic: &str, index: i32) -> Result<()> {
        self.ask(BrokerRequest::ElectPreferred {
            topic: topic.to_string(),
            index,
        })
        .await
        .map(|_| ())
    }

    /// The coordinator of `id` for a client on `listener`, as (id, host, port): the leader
    /// of the id's partition of `__consumer_offsets` (groups) or `__transaction_state`
    /// (transactional ids). The topic is created on first use (as Kafka does), with
    /// `offsets.topic.*` or `transaction.state.log.*`; until it can be,
    /// COORDINATOR_NOT_AVAILABLE.
    pub async fn coordinator(
        &self,
        kind: CoordinatorKind,
        id: &str,
        listener: &str,
    ) -> std::result::Result<(i32, String, u16), ResponseError> {
        let c = &self.node.config.cluster;
        let (topic, partitions, replication_factor, configs) = match kind {
            CoordinatorKind::Group => (
                OFFSETS_TOPIC,
                c.offsets_topic_num_partitions,
                c.offsets_topic_replication_factor,
                offsets_topic_configs(&self.node.config),
            ),
            CoordinatorKind::Transaction => (
                TXN_TOPIC,
                c.txn_topic_num_partitions,
                c.txn_topic_replication_factor,
                txn_topic_configs(&self.node.config),
            ),
            CoordinatorKind::Share => (
                SHARE_STATE_TOPIC,
                c.share_topic_num_partitions,
                c.share_topic_replication_factor,
                share_topic_configs(&self.node.config),
            ),
        };
        if !self.image().names.contains_key(topic) {
            let created = self
                .create_topic(
                    topic,
                    Layout::Spread {
                        partitions,
                        replication_factor,
                    },
                    configs,
                    false,
                )
                .await;
            match created {
                Ok(()) => {}
                Err(e) if e.response_error() == ResponseError::TopicAlreadyExists => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot create {topic}");
                    return Err(ResponseError::CoordinatorNotAvailable);
                }
            }
        }
        let image = self.image();
        let t = image
            .names
            .get(topic)
            .and_then(|id| image.topics.get(id))
            .filter(|t| !t.partitions.is_empty())
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let leader =
            t.partitions[coordinated::partition_for(id, t.partitions.len()) as usize].leader;
        if leader == self.node.id() && !self.lease.holds() {
            // Possibly fenced, its partitions led elsewhere now: not the one to name.
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        self.live_brokers(listener)
            .into_iter()
            .find(|b| b.0 == leader)
            .ok_or(ResponseError::CoordinatorNotAvailable)
    }

    /// The high watermark of `topic`'s partition `index`, asked of its leader `leader` on
    /// the inter-broker listener (ListOffsets for the latest offset, as a consumer would).
    pub async fn high_watermark_at(
        &self,
        leader: i32,
        topic: &str,
        index: i32,
    ) -> std::result::Result<i64, ResponseError> {
        use kafka_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse};
        let listener = self.node.config.inter_broker_listener();
        let (_, host, port) = self
            .live_brokers(listener)
            .into_iter()
            .find(|b| b.0 == leader)
            .ok_or(ResponseError::LeaderNotAvailable)?;
        let req = ListOffsetsRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(crate::wire::topic_name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(index)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(-1)])]);
        let r: ListOffsetsResponse = peer::call(
            &self.node.dial,
            &format!("{host}:{port}"),
            ApiKey::ListOffsets,
            7,
            &req,
            Duration::from_secs(5),
        )
        .await?;
        let p = r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .next()
            .ok_or(ResponseError::UnknownServerError)?;
        match ResponseError::try_from_code(p.error_code) {
            Some(e) => Err(e),
            None => Ok(p.offset),
        }
    }

    /// Live brokers (unfenced), by id, with their endpoint on `listener`.
    pub fn live_brokers(&self, listener: &str) -> Vec<(i32, String, u16)> {
        let image = self.image();
        image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                let e = b
                    .endpoints
                    .iter()
                    .find(|e| e.listener == listener)
                    .or(b.endpoints.first())?;
                Some((b.id, e.host.clone(), e.port))
            })
            .collect()
    }
}

/// The config overrides `__consumer_offsets` is created with: compacted.
pub fn offsets_topic_configs(config: &Config) -> BTreeMap<String, String> {
    internal_topic_configs(config.cluster.offsets_topic_segment_bytes, None)
}

/// The config overrides `__transaction_state` is created with: compacted, and written with
/// `transaction.state.log.min.isr` in sync.
pub fn txn_topic_configs(config: &Config) -> BTreeMap<String, String> {
    let c = &config.cluster;
    internal_topic_configs(c.txn_topic_segment_bytes, Some(c.txn_topic_min_isr))
}

/// The config overrides `__share_group_state` is created with: compacted, and written with
/// `share.coordinator.state.topic.min.isr` in sync.
pub fn share_topic_configs(config: &Config) -> BTreeMap<String, String> {
    let c = &config.cluster;
    internal_topic_configs(c.share_topic_segment_bytes, Some(c.share_topic_min_isr))
}

/// A coordinator's topic, as Kafka creates them: compacted (never deleted by time), with
/// its `*.segment.bytes`.
fn internal_topic_configs(segment_bytes: i32, min_isr: Option<i32>) -> BTreeMap<String, String> {
    let mut c = BTreeMap::from([
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("retention.ms".to_string(), "-1".to_string()),
        ("segment.bytes".to_string(), segment_bytes.to_string()),
    ]);
    if let Some(isr) = min_isr {
        c.insert("min.insync.replicas".to_string(), isr.to_string());
    }
    c
}

/// The leader's HW: the minimum LEO over the ISR (this broker's own LEO included); a
/// follower that has not fetched in this epoch holds it where it is.
pub fn recompute_hw(me: i32, p: &Partition) {
    let leo = p.log.offsets().log_end;
    let min = {
        let guard = p.replica.lock();
        let Some(a) = guard.as_ref() else { return };
        if a.leader != me {
            return;
        }
        a.isr
            .iter()
            .map(|r| {
                if *r == me {
                    leo
                } else {
                    a.followers.get(r).map_or(-1, |f| f.leo)
                }
            })
            .min()
            .unwrap_or(leo)
    };
    if min >= 0 {
        p.log.advance_hw(min);
    }
}

/// acks=all: waits until the ISR holds everything below `end` (the HW passed it), as long as this broker
/// still leads in the same epoch; then checks the ISR is still at least min.insync.replicas.
pub async fn await_committed(
    p: &Partition,
    node: i32,
    epoch: i32,
    end: i64,
    min_isr: i32,
    timeout: Duration,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let moved = p.log.hw_moved.notified();
        tokio::pin!(moved);
        moved.as_mut().enable();
        let place = p.placement();
        if place.leader != node || place.leader_epoch != epoch {
            return Err(Error::NotLeaderOrFollower);
        }
        if p.log.offsets().high_watermark >= end {
            let isr = place.isr.len();
            if (isr as i32) < min_isr {
                return Err(Error::NotEnoughReplicasAfterAppend { isr, min: min_isr });
            }
            return Ok(());
        }
        tokio::select! {
            _ = moved => {}
            _ = tokio::time::sleep_until(deadline) => return Err(Error::RequestTimedOut),
        }
    }
}

/// Where to reach broker `id` for replication: its endpoint on the inter-broker listener.
fn endpoint(image: &Image, id: i32, config: &crate::config::Config) -> Option<String> {
    let b = image.brokers.get(&id)?;
    let name = config.inter_broker_listener();
    let e = b
        .endpoints
        .iter()
        .find(|e| e.listener == name)
        .or(b.endpoints.first())?;
    Some(format!("{}:{}", e.host, e.port))
}
