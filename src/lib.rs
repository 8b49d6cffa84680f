//! Cairn: a Kafka-compatible message broker with its data in RocksDB.
//!
//! # Layout
//!
//! Layers, from the top down; a module imports only modules below it (`docs/ARCHITECTURE.md`
//! draws the picture and says how to check it):
//!
//! - `main.rs`: config -> storage -> the cluster, when there is one -> listeners; runs until
//!   SIGTERM.
//! - [`server`] (listeners, one task per connection, ordered responses, shutdown) and
//!   [`scrape`] (`/metrics`, `/health`, `/ready`: reads the services at scrape time).
//! - [`dispatch`]: the one table of APIs and versions; ApiVersions is answered from it.
//! - [`handlers`]: one small module per API family: check, delegate, respond; and the
//!   [`handlers::RequestContext`] they all take.
//! - [`broker`]: the services handlers call: config, catalog, group and transaction
//!   coordinators, cluster, producer ids.
//! - [`replication`]: a broker in a cluster: registration, heartbeats, following the
//!   metadata image, follower fetchers, HW and ISR on the leader, the coordinators'
//!   internal topics, transaction markers to leaders. It works on a [`replication::Node`]
//!   of narrow handles, never on the broker.
//! - [`topics`] (the catalog: names, stable ids, partitions, config overrides), [`placement`]
//!   (a partition's leader, ISR, epochs and followers' progress) and [`topic_config`].
//! - [`coordinator`]: consumer groups (classic and KIP-848), committed offsets and
//!   transactions, each a pure state machine with an async shell. [`share`]: share
//!   groups' records on a partition leader (KIP-932): share partitions and share sessions.
//!   [`log`]: a partition's
//!   log: offsets, leader epochs, idempotence, transactions (markers, LSO, aborted index),
//!   HW/LEO, retention.
//! - [`controller`]: the cluster metadata state machine (records, image, decisions), the
//!   Raft quorum that orders it, and the RPCs brokers send it.
//! - [`metrics`]: counter handles under Strimzi's and kafka_exporter's names (no state).
//! - [`storage`]: narrow storage traits; `storage::rocks` is the only place RocksDB is named.
//!   [`tls`]: rustls configurations from a listener's `ssl.*` settings, for listeners and
//!   for this broker's connections to the others. [`dial`]: how a node reaches another's
//!   listener (TCP, TLS, a SASL login): followers and peer calls on the inter-broker
//!   listener, voters and brokers' requests on the controller listener.
//! - At the bottom, used by all: [`wire`] (Kafka frames and envelopes), [`config`],
//!   [`security`] (SCRAM's credentials and exchange),
//!   [`error`] (the one mapping to Kafka error codes), [`clock`], [`shutdown`],
//!   [`thread_time`] (what a request costs the threads, for `request_percentage`).
//!
//! # A request's way
//!
//! socket -> [`wire::frame`] (length prefix, checked against `socket.request.max.bytes`)
//! -> [`dispatch::handle`] (api key and version checked against the table, header and body
//! decoded with kafka-protocol) -> a handler -> [`log::PartitionLog`] / [`topics::Catalog`]
//! -> [`storage`] -> the response, encoded and queued for the connection's writer, which
//! sends responses in request order.
//!
//! # Where state lives
//!
//! RocksDB column families (see [`storage::rocks`]) hold everything durable: batches (`log`),
//! batch metadata (`index`), producer states (`producers`), and topics, counters, epochs and
//! log start offsets (`meta`). In memory: the catalog snapshot, each partition's LEO, HW,
//! leader-epoch cache, producer states and a cache of its most recent batches.

pub mod allocator;
pub mod broker;
pub mod clock;
pub mod config;
pub mod controller;
pub mod coordinator;
pub mod dial;
pub mod dispatch;
pub mod error;
pub mod group_config;
pub mod handlers;
pub mod log;
pub mod metrics;
pub mod placement;
pub mod replication;
pub mod scrape;
pub mod security;
pub mod server;
pub mod share;
pub mod shutdown;
pub mod storage;
pub mod thread_time;
pub mod tls;
pub mod topic_config;
pub mod topics;
pub mod wire;
