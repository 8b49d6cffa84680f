//! One module per API family. A handler decodes nothing itself (dispatch hands it a typed
//! request), checks what the request asks, delegates to the catalog or the partition logs,
//! and builds the typed response. Errors become wire codes through `crate::error` only.

pub mod acls;
pub mod api_versions;
pub mod client_quotas;
pub mod configs;
pub mod consumer_groups;
pub mod delete_records;
pub mod describe_cluster;
pub mod describe_log_dirs;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod elect_leaders;
pub mod features;
pub mod fetch;
pub mod groups;
pub mod init_producer_id;
mod leader_hints;
pub mod list_config_resources;
pub mod list_offsets;
pub mod metadata;
pub mod offset_for_leader_epoch;
pub mod offsets;
pub mod produce;
pub mod reassignments;
pub mod sasl;
pub mod scram_credentials;
pub mod share_fetch;
pub mod share_groups;
pub mod share_state;
pub mod topics;
pub mod transactions;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kafka_protocol::messages::ApiKey;

pub use crate::wire::{broker_id, str_bytes, topic_name};

/// Where a request came from.
pub struct Connection {
    pub listener: Arc<str>,
    pub peer: SocketAddr,
    /// Who the client is as its transport says: `User:ANONYMOUS`, or on TLS with a client
    /// certificate `User:` and the certificate's subject. SASL overrides it
    /// ([`Connection::principal`]).
    pub principal: Arc<str>,
    /// On a SASL listener, the connection's authentication.
    pub sasl: Option<std::sync::Mutex<crate::security::sasl::Session>>,
    /// Until when (ms since the epoch) a throttled client's connection is not read, 0 when
    /// it is not throttled.
    muted_until_ms: AtomicU64,
}

impl Connection {
    pub fn new(
        listener: Arc<str>,
        peer: SocketAddr,
        principal: Arc<str>,
        sasl: Option<std::sync::Mutex<crate::security::sasl::Session>>,
    ) -> Connection {
        Connection {
            listener,
            peer,
            principal,
            sasl,
            muted_until_ms: AtomicU64::new(0),
        }
    }

    /// Mutes the connection for `ms` after the response it is handling (KIP-219), or
    /// longer if it already is.
    pub fn mute_for(&self, ms: u64) {
        if ms > 0 {
            let until = crate::clock::now_ms_unsigned().saturating_add(ms);
            self.muted_until_ms.fetch_max(until, Ordering::AcqRel);
        }
    }

    /// Until when the connection is muted, if it is; clears the mute.
    pub fn take_mute(&self) -> Option<u64> {
        match self.muted_until_ms.swap(0, Ordering::AcqRel) {
            0 => None,
            until => Some(until),
        }
    }

    /// The connection's SASL session, locked; `None` on a listener without SASL. Requests
    /// of a connection are handled one at a time, so the lock is never contended.
    pub fn session(&self) -> Option<std::sync::MutexGuard<'_, crate::security::sasl::Session>> {
        self.sasl
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Who the client is: its SASL principal once authenticated, else its transport's.
    pub fn principal(&self) -> String {
        self.session()
            .and_then(|s| s.principal().map(str::to_string))
            .unwrap_or_else(|| self.principal.to_string())
    }
}

/// What a handler knows about the request it serves (dispatch fills it from the header).
pub struct RequestContext<'a> {
    pub conn: &'a Connection,
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// The request's size (its frame without the length prefix), which a produce quota
    /// counts.
    pub request_bytes: usize,
    /// Whether [`RequestContext::throttle_request`] has counted the request's thread time.
    pub request_time_counted: std::sync::atomic::AtomicBool,
    /// The record sets in pieces that the response stands in for (Fetch).
    pub record_sets: crate::wire::splice::RecordSets,
}

impl RequestContext<'_> {
    /// What the authorizer lets this request's principal do (everything with none).
    pub fn access(&self, broker: &crate::broker::Broker) -> crate::broker::authorizer::Access {
        broker.access(|| (self.conn.principal(), host_address(self.conn.peer.ip())))
    }

    /// Counts `bytes` (worked out only when a quota applies; percent-seconds for the
    /// request quota) against the client's quota of `kind`, if one applies, and mutes the
    /// connection for the throttle that earns: the throttle in ms (0 within the quota),
    /// the quota and the bytes, so a fetch can take them back.
    pub fn throttle(
        &self,
        broker: &crate::broker::Broker,
        kind: crate::broker::throttle::Kind,
        bytes: impl FnOnce() -> f64,
    ) -> Option<(u64, crate::controller::quotas::Applied, f64)> {
        let client_id = self.client_id.as_deref().unwrap_or("");
        let quota = broker.client_quota(kind, || self.conn.principal(), client_id)?;
        let bytes = bytes();
        let now = crate::clock::now_ms_unsigned();
        let ms = broker.throttles.record(kind, &quota, bytes, now);
        self.conn.mute_for(ms);
        Some((ms, quota, bytes))
    }

    /// Counts the request's thread time so far ([`crate::thread_time::so_far`]), in
    /// percent-seconds, against the client's `request_percentage` quota, if one applies,
    /// and mutes the connection for the throttle that earns (at most a second, KIP-124):
    /// the throttle in ms. Only the first call of a request counts; later ones return 0.
    pub fn throttle_request(&self, broker: &crate::broker::Broker) -> u64 {
        if self.request_time_counted.swap(true, Ordering::AcqRel) {
            return 0;
        }
        let spent = crate::thread_time::so_far();
        let percent = || spent.as_secs_f64() * 100.0;
        self.throttle(broker, crate::broker::throttle::Kind::Request, percent)
            .map_or(0, |(ms, _, _)| ms)
    }

    /// Whether this request's principal may perform `operation` on the cluster.
    pub fn may_on_cluster(&self, broker: &crate::broker::Broker, operation: i8) -> bool {
        self.access(broker).allows_cluster(operation)
    }
}

/// Kafka's check of a described group: DESCRIBE on it (else GROUP_AUTHORIZATION_FAILED),
/// and its authorized operations when the request asks for them.
pub fn group_described(
    access: &crate::broker::authorizer::Access,
    group: &str,
    with_operations: bool,
) -> Result<i32, kafka_protocol::ResponseError> {
    use crate::security::acl::{op, resource};
    if !access.allows(op::DESCRIBE, resource::GROUP, group) {
        return Err(kafka_protocol::ResponseError::GroupAuthorizationFailed);
    }
    Ok(match with_operations {
        true => access.operations(resource::GROUP, group, GROUP_OPERATIONS_ALL),
        false => OPERATIONS_UNKNOWN,
    })
}

/// A client's address as Java's `InetAddress.getHostAddress` writes it, which is what
/// ACLs' hosts are compared with: IPv4-mapped IPv6 as IPv4, IPv6 uncompressed.
fn host_address(ip: std::net::IpAddr) -> String {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|s| format!("{s:x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}

/// Operations every client may perform on a topic while no authorizer is configured:
/// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
pub const TOPIC_OPERATIONS_ALL: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
/// Cluster operations with no authorizer: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION,
/// DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
pub const CLUSTER_OPERATIONS_ALL: i32 =
    (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);
/// Group operations with no authorizer: READ, DELETE, DESCRIBE.
pub const GROUP_OPERATIONS_ALL: i32 = (1 << 3) | (1 << 6) | (1 << 8);
/// What Kafka sends when authorized operations were not requested.
pub const OPERATIONS_UNKNOWN: i32 = i32::MIN;
