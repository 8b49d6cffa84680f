//! The broker: the services handlers call (configuration, the topic catalog, the group
//! coordinator, the cluster when there is one, the producer id allocator), opened over the
//! storage of each log dir. Handlers receive an `Arc<Broker>`; the layers below it
//! (replication, the coordinator, the catalog) never see it and get the narrow handles they
//! need instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use tokio::sync::watch;

use crate::config::{Config, Listener};
use crate::controller::metadata::{Record, NO_LEADER};
use crate::controller::service::{ControllerNode, Seed};
use crate::coordinator::group::GroupLimits;
use crate::coordinator::share_state::ShareCoordinator;
use crate::coordinator::txn_coordinator::{ProducerIds, TxnConfig, TxnCoordinator};
use crate::coordinator::{Coordinator, CoordinatorConfig};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::replication::{Cluster, CoordinatorKind, Node, SharePersister};
use crate::share::Shares;
use crate::shutdown;
use crate::storage::rocks::RocksStore;
use crate::storage::{GroupStore, MetaStore};
use crate::topics::{Catalog, LogDir};

mod authority;
pub mod authorizer;
pub mod cleaner;
pub mod fetch_memory;
pub mod throttle;

pub use authority::{only_dynamic, Reassigning};

const CLUSTER_ID_KEY: &[u8] = b"cluster_id";
/// The end of the last block of producer ids this broker was given (8 bytes, big-endian).
const PRODUCER_ID_BLOCK_KEY: &[u8] = b"producer_id_block_end";

pub struct Broker {
    pub config: Arc<Config>,
    pub catalog: Arc<Catalog>,
    pub groups: Arc<Coordinator>,
    /// The transaction coordinator (of the transactional ids whose `__transaction_state`
    /// partition this broker leads).
    pub txns: Arc<TxnCoordinator>,
    /// The share partitions (KIP-932) of the partitions this broker leads, and the share
    /// sessions of the members fetching from them.
    pub shares: Arc<Shares>,
    /// The share coordinator (of the share partitions whose `__share_group_state`
    /// partition this broker leads).
    pub share_states: Arc<ShareCoordinator>,
    pub metrics: Arc<Metrics>,
    /// What the log cleaner last did, for its gauges.
    pub cleaner: cleaner::CleanerStats,
    /// Usage of the clients a byte-rate quota applies to.
    pub throttles: throttle::Throttles,
    /// The budget for fetched records held until their responses are sent.
    pub fetch_memory: fetch_memory::FetchMemory,
    /// The id this node minted on its first start: the cluster's id when this node's voter
    /// starts the metadata log (see [`Broker::cluster_id`]).
    local_cluster_id: String,
    /// The cluster this broker is part of (set once at start; a single node is a cluster
    /// of one).
    cluster: std::sync::OnceLock<Arc<Cluster>>,
    /// Set once storage is open and every listener is bound (`/ready`).
    ready: AtomicBool,
    meta: Arc<dyn MetaStore>,
    rocks: Vec<Arc<RocksStore>>,
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
    shutdown: watch::Sender<bool>,
}

impl Broker {
    /// Opens a RocksDB store in each log dir and loads the catalog. The first dir also
    /// holds the metadata (topics, ids, counters) and the group coordinator's state. `apis`
    /// is the dispatch table, for the per-API metrics.
    pub fn open(config: Config, apis: &[(ApiKey, i16, i16)]) -> Result<Arc<Broker>> {
        let mut rocks = Vec::new();
        let mut dirs = Vec::new();
        for path in &config.log_dirs {
            let store = Arc::new(
                RocksStore::open(path, config.store_direct_writes)
                    .map_err(|e| Error::Storage(format!("log dir {}: {e}", path.display())))?,
            );
            dirs.push(LogDir::new(path.clone(), store.clone()));
            rocks.push(store);
        }
        let first = rocks[0].clone();
        Self::with_stores(config, apis, first.clone(), dirs, first, rocks)
    }

    /// Builds a broker over any stores (unit tests use the in-memory one).
    pub fn with_stores(
        config: Config,
        apis: &[(ApiKey, i16, i16)],
        meta: Arc<dyn MetaStore>,
        dirs: Vec<LogDir>,
        groups: Arc<dyn GroupStore>,
        rocks: Vec<Arc<RocksStore>>,
    ) -> Result<Arc<Broker>> {
        let config = Arc::new(config);
        let cluster_id = match meta.get(CLUSTER_ID_KEY)? {
            Some(v) => String::from_utf8(v)
                .map_err(|_| Error::Storage("cluster id is not UTF-8".into()))?,
            None => {
                let id = crate::controller::metadata::new_cluster_id();
                meta.put(CLUSTER_ID_KEY, id.as_bytes())?;
                id
            }
        };
        let metrics = Arc::new(Metrics::new(apis));
        let catalog = Arc::new(Catalog::open(
            config.clone(),
            meta.clone(),
            dirs,
            metrics.clone(),
        )?);
        let ms = Duration::from_millis;
        let groups = Arc::new(Coordinator::open(
            groups,
            CoordinatorConfig {
                limits: GroupLimits {
                    initial_rebalance_delay: ms(config.group_initial_rebalance_delay_ms),
                    min_session_timeout: ms(config.group_min_session_timeout_ms),
                    max_session_timeout: ms(config.group_max_session_timeout_ms),
                },
                offsets_retention: ms(config.offsets_retention_ms),
                retention_check_interval: ms(config.offsets_retention_check_interval_ms),
                consumer_session_timeout: ms(config.group_consumer_session_timeout_ms),
                share_session_timeout: ms(config.group_share_session_timeout_ms),
            },
        )?);
        let (shutdown, _) = watch::channel(false);
        let txn_config = TxnConfig {
            timeout_max_ms: config.cluster.transaction_max_timeout_ms,
            abort_check_interval: ms(config.cluster.transaction_abort_interval_ms),
            id_expiration_ms: config.cluster.transactional_id_expiration_ms as i64,
            id_expiration_check_interval: ms(config.cluster.transaction_id_expiration_check_ms),
        };
        let txn_store = groups.store().clone();
        let share_states = Arc::new(ShareCoordinator::new(groups.store().clone()));
        let fetch_memory = fetch_memory::FetchMemory::new(config.fetch_memory_bytes_max);
        Ok(Arc::new_cyclic(|me| Broker {
            txns: Arc::new(TxnCoordinator::new(
                txn_store,
                Arc::new(BrokerProducerIds(me.clone())),
                txn_config,
            )),
            shares: Arc::new(Shares::default()),
            share_states,
            config,
            catalog,
            groups,
            local_cluster_id: cluster_id,
            metrics,
            cleaner: cleaner::CleanerStats::default(),
            throttles: throttle::Throttles::default(),
            fetch_memory,
            cluster: std::sync::OnceLock::new(),
            ready: AtomicBool::new(false),
            meta,
            rocks,
            producer_ids: tokio::sync::Mutex::new((0, 0)),
            shutdown,
        }))
    }

    /// Starts this node's voter of the metadata quorum (listening for the other voters on
    /// `listener`, when there are any) and joins the cluster as a broker (once, at start),
    /// reaching the other brokers through `dial`, and the other voters over TLS when
    /// `quorum_tls` is given.
    /// An empty metadata log is seeded with this data dir's cluster id and, for a data dir
    /// of an earlier single-node release, its topics and group state.
    pub async fn start_cluster(
        self: &Arc<Self>,
        listener: Option<tokio::net::TcpListener>,
        dial: crate::dial::Dialer,
        quorum_tls: Option<crate::tls::Mutual>,
    ) -> anyhow::Result<Arc<Cluster>> {
        let seed = self.seed();
        let controller = ControllerNode::start(
            &self.config,
            listener,
            seed,
            quorum_tls,
            self.metrics.clone(),
        )
        .await?;
        let node = Node {
            config: self.config.clone(),
            catalog: self.catalog.clone(),
            groups: self.groups.clone(),
            txns: self.txns.clone(),
            share_states: self.share_states.clone(),
            meta: self.meta.clone(),
            shutdown: self.shutdown_signal(),
            dial: Arc::new(dial),
        };
        let cluster = Cluster::start(node, controller);
        self.shares
            .persist_through(Arc::new(SharePersister::new(cluster.clone())));
        let _ = self.cluster.set(cluster.clone());
        Ok(cluster)
    }

    /// What this node's catalog and coordinator hold, as the first records of a metadata
    /// log: each topic with this node as its only replica (leaderless until this broker is
    /// unfenced, as after any restart), and `__consumer_offsets` when groups exist, so they
    /// are served from it as on a node that always had one.
    fn seed(&self) -> Seed {
        let me = self.node_id();
        let topic = |name: &str, id, configs| Record::Topic {
            name: name.to_string(),
            id,
            configs,
        };
        let on_me = |topic, index| Record::Partition {
            topic,
            index,
            replicas: vec![me],
            isr: vec![me],
            leader: NO_LEADER,
        };
        let mut records = Vec::new();
        let topics = self.catalog.all();
        for t in &topics {
            records.push(topic(&t.name, t.id, t.overrides.clone()));
            records.extend(t.partitions.iter().map(|p| on_me(t.id, p.index)));
        }
        let offsets = crate::topics::OFFSETS_TOPIC;
        if !self.groups.list().is_empty() && !topics.iter().any(|t| t.name == offsets) {
            let id = uuid::Uuid::new_v4();
            records.push(topic(
                offsets,
                id,
                crate::replication::offsets_topic_configs(&self.config),
            ));
            records.extend(
                (0..self.config.cluster.offsets_topic_num_partitions).map(|i| on_me(id, i)),
            );
        }
        Seed {
            cluster_id: self.local_cluster_id.clone(),
            records,
        }
    }

    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.get()
    }

    /// Whether the cluster has finalized `share.version` 1 (`kafka-features upgrade
    /// --feature share.version=1`): until then the share group APIs answer
    /// UNSUPPORTED_VERSION and ApiVersions does not list them, as Kafka's do.
    pub fn share_groups_enabled(&self) -> bool {
        self.cluster().is_some_and(|c| {
            c.image()
                .feature(crate::controller::metadata::SHARE_VERSION)
                >= 1
        })
    }

    /// The cluster, or CONTROLLER_UNAVAILABLE before this broker has joined it.
    pub(crate) fn quorum(&self) -> Result<&Arc<Cluster>> {
        self.cluster().ok_or(Error::ControllerUnavailable)
    }

    /// The cluster's id: the metadata quorum's (this node's own until it has one).
    pub fn cluster_id(&self) -> String {
        self.cluster()
            .and_then(|c| c.image().cluster_id.clone())
            .unwrap_or_else(|| self.local_cluster_id.clone())
    }

    /// The brokers clients may use, as (id, host, port) on `listener`: the live (unfenced)
    /// ones.
    pub fn live_brokers(&self, listener: &str) -> Vec<(i32, String, u16)> {
        self.cluster()
            .map(|c| c.live_brokers(listener))
            .unwrap_or_default()
    }

    /// The id Metadata and DescribeCluster give as the controller: Kafka 4 names a live
    /// broker (clients send controller-bound requests to it, any broker forwards them);
    /// this one when it is among `brokers`.
    pub fn controller_for_clients(&self, brokers: &[(i32, String, u16)]) -> i32 {
        brokers
            .iter()
            .map(|b| b.0)
            .find(|id| *id == self.node_id())
            .or(brokers.first().map(|b| b.0))
            .unwrap_or(self.node_id())
    }

    /// The broker that coordinates `id`, as (id, host, port) for a client on `listener`:
    /// the leader of the id's `__consumer_offsets` (groups) or `__transaction_state`
    /// (transactional ids) partition.
    pub async fn coordinator(
        &self,
        kind: CoordinatorKind,
        id: &str,
        listener: &str,
    ) -> std::result::Result<(i32, String, u16), kafka_protocol::ResponseError> {
        match self.cluster() {
            Some(c) => c.coordinator(kind, id, listener).await,
            None => Err(kafka_protocol::ResponseError::CoordinatorNotAvailable),
        }
    }

    /// The `__consumer_offsets` partition of `group` (AddOffsetsToTxn): by the topic's
    /// partition count, or the count it will be created with (as Kafka computes it).
    pub fn offsets_partition(&self, group: &str) -> i32 {
        let n = match self.catalog.get(crate::topics::OFFSETS_TOPIC) {
            Some(t) => t.partitions.len(),
            None => self.config.cluster.offsets_topic_num_partitions.max(1) as usize,
        };
        crate::coordinator::partition_for(group, n)
    }

    /// KIP-890 for transactional writes to `partitions`, which this broker leads (batches,
    /// or offsets for TxnOffsetCommit): asks the transaction coordinator of `id` (this
    /// broker's, or another's with AddPartitionsToTxn v4+) whether they are in the
    /// producer's ongoing transaction, or with `add` (transaction version 2, whose clients
    /// add no partitions themselves) adds them. An add that meets the last transaction still
    /// ending (CONCURRENT_TRANSACTIONS) is retried for 100 ms, as Kafka does, before the
    /// client is told to retry. One answer per partition, in order.
    pub async fn verify_txn(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[crate::coordinator::transactions::TxnPartition],
        add: bool,
    ) -> Vec<std::result::Result<(), kafka_protocol::ResponseError>> {
        use kafka_protocol::ResponseError;
        const RETRY: std::time::Duration = std::time::Duration::from_millis(20);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(100);
        let mut answers = vec![Err(ResponseError::ConcurrentTransactions); partitions.len()];
        loop {
            let pending: Vec<usize> = (0..partitions.len())
                .filter(|&i| answers[i] == Err(ResponseError::ConcurrentTransactions))
                .collect();
            let asked: Vec<_> = pending.iter().map(|&i| partitions[i].clone()).collect();
            let got = self
                .verify_or_add(id, producer_id, epoch, &asked, add)
                .await;
            for (i, r) in pending.into_iter().zip(got) {
                answers[i] = r;
            }
            let again = add
                && answers.contains(&Err(ResponseError::ConcurrentTransactions))
                && tokio::time::Instant::now() + RETRY <= deadline;
            if !again {
                return answers;
            }
            tokio::time::sleep(RETRY).await
        }
    }

    async fn verify_or_add(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[crate::coordinator::transactions::TxnPartition],
        add: bool,
    ) -> Vec<std::result::Result<(), kafka_protocol::ResponseError>> {
        use kafka_protocol::ResponseError;
        let local = match add {
            true => {
                let r = self
                    .txns
                    .add_partitions(id, producer_id, epoch, partitions, true)
                    .await;
                vec![r; partitions.len()]
            }
            false => partitions
                .iter()
                .map(|p| self.txns.verify(id, producer_id, epoch, p))
                .collect(),
        };
        if !local.contains(&Err(ResponseError::NotCoordinator)) {
            return local;
        }
        let remote = async {
            let cluster = self
                .quorum()
                .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
            let listener = self.config.inter_broker_listener();
            let (_, host, port) = cluster
                .coordinator(CoordinatorKind::Transaction, id, listener)
                .await?;
            Ok((cluster, format!("{host}:{port}")))
        };
        match remote.await {
            Ok((cluster, addr)) => {
                let dial = &cluster.node().dial;
                crate::replication::verify_remote(
                    dial,
                    &addr,
                    id,
                    producer_id,
                    epoch,
                    partitions,
                    add,
                )
                .await
            }
            Err(e) => vec![Err(e); partitions.len()],
        }
    }

    /// WriteTxnMarkers on the leader: writes one marker and waits for the ISR.
    pub async fn write_marker(
        &self,
        topic: &str,
        index: i32,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<()> {
        let cluster = self.quorum()?;
        crate::replication::markers::write_local(
            cluster.node(),
            topic,
            index,
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
        )
        .await
    }

    /// The high watermark of `topic`'s partition `index`, from its leader: this broker's
    /// log, or another broker asked (what share-partition lag is measured against).
    pub async fn high_watermark(
        &self,
        topic: &str,
        index: i32,
    ) -> std::result::Result<i64, kafka_protocol::ResponseError> {
        let (_, p) = self
            .catalog
            .partition(topic, index)
            .map_err(|e| e.response_error())?;
        let leader = p.placement().leader;
        match self.cluster() {
            Some(c) if leader != self.node_id() => c.high_watermark_at(leader, topic, index).await,
            _ => {
                p.replica
                    .check_leader(self.node_id())
                    .map_err(|e| e.response_error())?;
                Ok(p.log.offsets().high_watermark)
            }
        }
    }

    /// A partition this broker leads, or UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER.
    pub fn led_partition(
        &self,
        topic: &str,
        index: i32,
    ) -> Result<(Arc<crate::topics::Topic>, Arc<crate::topics::Partition>)> {
        let (t, p) = self.catalog.partition(topic, index)?;
        p.replica.check_leader(self.node_id())?;
        Ok((t, p))
    }

    /// Marks the broker ready to serve (storage open, listeners bound).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.is_shutting_down()
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// The advertised endpoint for clients that came in on `listener`.
    pub fn advertised(&self, listener: &str) -> &Listener {
        self.config
            .advertised_listeners
            .iter()
            .find(|l| l.name == listener)
            .unwrap_or(&self.config.advertised_listeners[0])
    }

    /// A new producer id, never handed out before anywhere in the cluster: ids come in
    /// blocks from the controller (KIP-730), as Kafka's brokers get them. The end of each
    /// block is also kept locally, and the controller never hands out ids below it, so ids
    /// an earlier single-node release reserved on its own are not reused.
    pub async fn next_producer_id(&self) -> Result<i64> {
        let mut ids = self.producer_ids.lock().await;
        if ids.0 >= ids.1 {
            let at_least = match self.meta.get(PRODUCER_ID_BLOCK_KEY)? {
                Some(v) => i64::from_be_bytes(v.as_slice().try_into().map_err(|_| {
                    Error::Storage("the producer id block end is malformed".into())
                })?),
                None => 0,
            };
            let (start, end) = self.quorum()?.allocate_producer_ids(at_least).await?;
            let meta = self.meta.clone();
            // A synced write: off the runtime's worker threads.
            tokio::task::spawn_blocking(move || {
                meta.put(PRODUCER_ID_BLOCK_KEY, &end.to_be_bytes())
            })
            .await
            .map_err(|e| Error::Storage(format!("producer id block: {e}")))??;
            *ids = (start, end);
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Makes everything written so far durable (at shutdown).
    pub fn sync(&self) -> Result<()> {
        self.rocks.iter().try_for_each(|r| r.sync())
    }

    /// Forgets expired producers in every partition, leader or follower, every
    /// `producer.id.expiration.check.interval.ms` (`producer.id.expiration.ms`).
    pub async fn run_producer_expiration(self: Arc<Self>) {
        let mut shutdown = self.shutdown_signal();
        let period = Duration::from_millis(self.config.producer_id_expiration_check_ms);
        let expiration = self.config.producer_id_expiration_ms;
        while let Some(now) = next_pass(&mut shutdown, period).await {
            for topic in self.catalog.all() {
                for p in &topic.partitions {
                    match p.log.expire_producers(now, expiration).await {
                        Ok(0) => {}
                        Ok(n) => {
                            tracing::debug!(topic = %topic.name, partition = p.index, producers = n, "expired producer ids")
                        }
                        Err(err) => {
                            tracing::error!(topic = %topic.name, partition = p.index, error = %err, "producer expiration failed")
                        }
                    }
                }
            }
        }
    }

    /// Applies retention to every partition every `log.retention.check.interval.ms`.
    pub async fn run_retention(self: Arc<Self>) {
        let mut shutdown = self.shutdown_signal();
        let period = Duration::from_millis(self.config.log_retention_check_interval_ms);
        while let Some(now) = next_pass(&mut shutdown, period).await {
            for topic in self.catalog.all() {
                let e = topic.effective;
                if !e.delete_retention {
                    continue;
                }
                for p in &topic.partitions {
                    match p
                        .log
                        .apply_retention(now, e.retention_ms, e.retention_bytes)
                        .await
                    {
                        Ok(Some(start)) => {
                            tracing::info!(topic = %topic.name, partition = p.index, log_start = start, "retention moved the log start")
                        }
                        Ok(None) => {}
                        Err(err) => {
                            tracing::error!(topic = %topic.name, partition = p.index, error = %err, "retention failed")
                        }
                    }
                }
            }
        }
    }
}

/// Waits `period` for a periodic pass over the partitions: the wall clock then, or None
/// once shutdown is requested.
async fn next_pass(shutdown: &mut watch::Receiver<bool>, period: Duration) -> Option<i64> {
    tokio::select! {
        _ = tokio::time::sleep(period) => Some(crate::clock::now_ms()),
        _ = shutdown::requested(shutdown) => None,
    }
}

/// The transaction coordinator's producer ids: the broker's, from the controller's blocks.
struct BrokerProducerIds(std::sync::Weak<Broker>);

impl ProducerIds for BrokerProducerIds {
    fn next(&self) -> futures_util::future::BoxFuture<'_, Result<i64>> {
        Box::pin(async move {
            match self.0.upgrade() {
                Some(b) => b.next_producer_id().await,
                None => Err(Error::ControllerUnavailable),
            }
        })
    }
}
