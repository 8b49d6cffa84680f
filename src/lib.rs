//! Cairn: a Kafka-compatible message broker with its data in RocksDB.
//!
//! # Layout
//!
//! - [`config`]: `server.properties` + `KAFKA_*` environment + `--override` flags -> [`config::Config`].
//! - [`server`]: listeners, one task per connection, frames, ordered responses, shutdown.
//! - [`dispatch`]: the one table of APIs and versions; ApiVersions is built from it.
//! - [`handlers`]: one small module per API family: check, delegate, respond.
//! - [`topics`]: the topic catalog (names, stable ids, partitions, config overrides).
//! - [`topic_config`]: topic config keys, defaults, validation, effective settings.
//! - [`controller`]: the cluster metadata state machine (records, image, controller
//!   decisions), the Raft quorum that orders it, and the RPCs brokers send it.
//! - [`replication`]: a broker in a cluster: registration, heartbeats, following the
//!   metadata image, follower fetchers, HW and ISR on the leader.
//! - [`coordinator`]: consumer groups (classic and KIP-848), each a pure state machine, and
//!   committed offsets.
//! - [`log`]: a partition's log: offsets, leader epochs, idempotence, HW/LEO, retention.
//! - [`storage`]: narrow storage traits; `storage::rocks` is the only place RocksDB is named.
//! - [`metrics`]: Prometheus metrics under Strimzi's and kafka_exporter's names, and the HTTP
//!   listener serving `/metrics`, `/health` and `/ready`.
//! - [`error`]: our errors and the one mapping to Kafka error codes.
//! - [`broker`]: the shared state handlers see.
//!
//! # A request's way
//!
//! socket -> [`server::frame`] (length prefix, checked against `socket.request.max.bytes`)
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

pub mod broker;
pub mod config;
pub mod controller;
pub mod coordinator;
pub mod dispatch;
pub mod error;
pub mod handlers;
pub mod log;
pub mod metrics;
pub mod replication;
pub mod server;
pub mod storage;
pub mod topic_config;
pub mod topics;
