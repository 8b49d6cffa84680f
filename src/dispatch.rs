//! The one table of supported APIs: api key -> versions -> handler. ApiVersions is answered
//! from the same table, so an API is advertised exactly when it is served.
//!
//! `handle` takes a frame, finds its API, checks the version, decodes the request with
//! kafka-protocol, runs the handler inside a span and encodes the response. What it cannot
//! parse or does not serve closes that connection ([`Outcome::Close`]), with one exception
//! Kafka clients rely on: a too-new ApiVersions request gets a v0 answer with
//! UNSUPPORTED_VERSION and our table, so the client can retry with a version we know.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchResponse, RequestHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::ResponseError;
use tracing::Instrument;

use crate::broker::Broker;
use crate::handlers::{self, Connection, RequestContext};
use crate::metrics::errors::ErrorCodes;
use crate::thread_time;
use crate::wire::response_frame;
use crate::wire::splice::{spliced_response_frame, Pieces};
use crate::wire::throttle_time::ThrottleTime;

/// What became of one request.
pub enum Outcome {
    Respond(Pieces),
    /// acks=0 produce: Kafka sends nothing back.
    NoResponse,
    Close(String),
}

macro_rules! apis {
    ($( $key:ident : $min:literal ..= $max:literal => $kind:ident $handler:path ),* $(,)?) => {
        /// Every API Cairn serves with its version range, in api-key order.
        pub const APIS: &[(ApiKey, i16, i16)] = &[ $( (ApiKey::$key, $min, $max) ),* ];

        async fn call(broker: &Arc<Broker>, ctx: &RequestContext<'_>, body: &mut Bytes) -> Result<Option<Pieces>, String> {
            match ctx.api {
                $( ApiKey::$key => {
                    let started = Instant::now();
                    let response = thread_time::metered(async {
                        let request = Decodable::decode(body, ctx.version).map_err(|e| {
                            format!("cannot decode {:?} v{}: {e}", ctx.api, ctx.version)
                        })?;
                        let follower = from_follower!($kind, request);
                        let mut response = $handler(broker, ctx, request).await;
                        request_quota(broker, ctx, &mut response, follower);
                        Ok::<_, String>(response)
                    })
                    .await?;
                    observe!($kind, broker, ctx, started, &response);
                    reply!($kind, ctx, response)
                } )*
                other => Err(format!("api {other:?} is not served")),
            }
        }
    };
}

macro_rules! observe {
    (fetch, $broker:expr, $ctx:expr, $started:expr, $r:expr) => {
        observe!(always, $broker, $ctx, $started, $r)
    };
    (always, $broker:expr, $ctx:expr, $started:expr, $r:expr) => {
        $broker.metrics.request(
            $ctx.api,
            $ctx.version,
            $started.elapsed(),
            Some($r as &dyn ErrorCodes),
        )
    };
    (maybe, $broker:expr, $ctx:expr, $started:expr, $r:expr) => {
        $broker.metrics.request(
            $ctx.api,
            $ctx.version,
            $started.elapsed(),
            $r.as_ref().map(|r| r as &dyn ErrorCodes),
        )
    };
}

/// Whether a fetch is a follower's, which no request quota applies to (as Kafka).
macro_rules! from_follower {
    (fetch, $r:expr) => {{
        let r: &kafka_protocol::messages::FetchRequest = &$r;
        r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0
    }};
    ($other:ident, $r:expr) => {
        false
    };
}

macro_rules! reply {
    (fetch, $ctx:expr, $r:expr) => {
        encode_fetch($ctx, $r)
    };
    (always, $ctx:expr, $r:expr) => {
        encode_response($ctx, Some($r))
    };
    (maybe, $ctx:expr, $r:expr) => {
        encode_response($ctx, $r)
    };
}

apis! {
    // v0-2 are advertised but never decoded: librdkafka before 2.11.1 enables compression
    // only when the Produce range reaches v0 (KAFKA-18659); such a request closes the
    // connection because kafka-protocol, like Kafka 4, no longer parses them.
    Produce: 0..=13 => maybe handlers::produce::handle,
    // v13+ name topics by id; 17 is Kafka 4.1's newest.
    Fetch: 4..=17 => fetch handlers::fetch::handle,
    ListOffsets: 1..=10 => always handlers::list_offsets::handle,
    Metadata: 0..=13 => always handlers::metadata::handle,
    // Capped at 9 until topic ids (v10) are proven end to end, like Fetch.
    OffsetCommit: 2..=9 => always handlers::offsets::commit,
    OffsetFetch: 1..=9 => always handlers::offsets::fetch,
    FindCoordinator: 0..=6 => always handlers::groups::find_coordinator,
    JoinGroup: 0..=9 => always handlers::groups::join_group,
    Heartbeat: 0..=4 => always handlers::groups::heartbeat,
    LeaveGroup: 0..=5 => always handlers::groups::leave_group,
    SyncGroup: 0..=5 => always handlers::groups::sync_group,
    DescribeGroups: 0..=6 => always handlers::groups::describe_groups,
    ListGroups: 0..=5 => always handlers::groups::list_groups,
    ApiVersions: 0..=4 => always api_versions,
    SaslHandshake: 0..=1 => always handlers::sasl::handshake,
    SaslAuthenticate: 0..=2 => always handlers::sasl::authenticate,
    CreateTopics: 2..=7 => always handlers::topics::create,
    DeleteTopics: 1..=6 => always handlers::topics::delete,
    DeleteRecords: 0..=2 => always handlers::delete_records::handle,
    InitProducerId: 0..=5 => always handlers::init_producer_id::handle,
    // v4+ are the brokers' batched form (KIP-890 verification).
    AddPartitionsToTxn: 0..=5 => always handlers::transactions::add_partitions,
    AddOffsetsToTxn: 0..=4 => always handlers::transactions::add_offsets,
    // v5 (and TxnOffsetCommit v5, Produce v12+ for transactions) is transaction version 2:
    // clients send them once ApiVersions shows `transaction.version` 2 finalized.
    EndTxn: 0..=5 => always handlers::transactions::end_txn,
    WriteTxnMarkers: 1..=1 => always handlers::transactions::write_txn_markers,
    TxnOffsetCommit: 0..=5 => always handlers::transactions::txn_offset_commit,
    OffsetForLeaderEpoch: 2..=4 => always handlers::offset_for_leader_epoch::handle,
    DescribeAcls: 1..=3 => always handlers::acls::describe,
    CreateAcls: 1..=3 => always handlers::acls::create,
    DeleteAcls: 1..=3 => always handlers::acls::delete,
    DescribeConfigs: 1..=4 => always handlers::configs::describe,
    AlterConfigs: 0..=2 => always handlers::configs::alter,
    DescribeLogDirs: 1..=4 => always handlers::describe_log_dirs::handle,
    CreatePartitions: 0..=3 => always handlers::topics::create_partitions,
    DeleteGroups: 0..=2 => always handlers::groups::delete_groups,
    ElectLeaders: 0..=2 => always handlers::elect_leaders::handle,
    AlterPartitionReassignments: 0..=1 => always handlers::reassignments::alter,
    ListPartitionReassignments: 0..=0 => always handlers::reassignments::list,
    IncrementalAlterConfigs: 0..=1 => always handlers::configs::incremental_alter,
    OffsetDelete: 0..=0 => always handlers::offsets::delete,
    DescribeClientQuotas: 0..=1 => always handlers::client_quotas::describe,
    AlterClientQuotas: 0..=1 => always handlers::client_quotas::alter,
    DescribeUserScramCredentials: 0..=0 => always handlers::scram_credentials::describe,
    AlterUserScramCredentials: 0..=0 => always handlers::scram_credentials::alter,
    DescribeCluster: 0..=2 => always handlers::describe_cluster::handle,
    UpdateFeatures: 0..=2 => always handlers::features::handle,
    DescribeQuorum: 0..=2 => always handlers::describe_quorum::handle,
    DescribeProducers: 0..=0 => always handlers::transactions::describe_producers,
    DescribeTransactions: 0..=0 => always handlers::transactions::describe_transactions,
    ListTransactions: 0..=2 => always handlers::transactions::list_transactions,
    ConsumerGroupHeartbeat: 0..=1 => always handlers::consumer_groups::heartbeat,
    ConsumerGroupDescribe: 0..=1 => always handlers::consumer_groups::describe,
    DescribeTopicPartitions: 0..=0 => always handlers::describe_topic_partitions::handle,
    // KIP-932 share groups: advertised only once `share.version` 1 is finalized
    // (`gated_by_feature`). v1 is the first production version (Kafka 4.1+).
    ShareGroupHeartbeat: 1..=1 => always handlers::share_groups::heartbeat,
    ShareGroupDescribe: 1..=1 => always handlers::share_groups::describe,
    // v2 (KIP-1206 acquire mode, KIP-1222 renew) is read and written by `wire::newer`.
    ShareFetch: 1..=2 => always handlers::share_fetch::fetch,
    ShareAcknowledge: 1..=2 => always handlers::share_fetch::acknowledge,
    // v1 (KIP-1226 lag) is read and written by `wire::newer`, as is the state summary's.
    DescribeShareGroupOffsets: 0..=1 => always handlers::share_groups::describe_offsets,
    AlterShareGroupOffsets: 0..=0 => always handlers::share_groups::alter_offsets,
    DeleteShareGroupOffsets: 0..=0 => always handlers::share_groups::delete_offsets,
    // The share coordinator's RPCs, sent by share partitions' leaders.
    InitializeShareGroupState: 0..=0 => always handlers::share_state::initialize,
    ReadShareGroupState: 0..=0 => always handlers::share_state::read,
    WriteShareGroupState: 0..=0 => always handlers::share_state::write,
    DeleteShareGroupState: 0..=0 => always handlers::share_state::delete,
    ReadShareGroupStateSummary: 0..=1 => always handlers::share_state::summary,
    ListConfigResources: 0..=1 => always handlers::list_config_resources::handle,
}

/// `request_percentage` (Kafka's ClientRequestQuotaManager): the request's thread time
/// counts against its client's quota ([`RequestContext::throttle_request`], unless its
/// handler counted it already, as a consumer's fetch does), and a throttle it earns goes in
/// the response's `throttle_time_ms`. Follower fetches and the responses without the field
/// (brokers' requests to one another and SASL's) are exempt, as in Kafka.
fn request_quota<R: ThrottleTime>(
    broker: &Broker,
    ctx: &RequestContext<'_>,
    response: &mut R,
    follower: bool,
) {
    if follower || !R::CARRIED {
        return;
    }
    let ms = ctx.throttle_request(broker);
    if ms > 0 {
        response.raise_throttle_time(ms);
    }
}

fn supported(api: ApiKey, version: i16) -> Option<bool> {
    APIS.iter()
        .find(|(k, _, _)| *k == api)
        .map(|(_, min, max)| (*min..=*max).contains(&version))
}

/// Handles one frame (without its length prefix).
pub async fn handle(broker: &Arc<Broker>, conn: &Connection, mut frame: Bytes) -> Outcome {
    if frame.len() < 8 {
        return Outcome::Close(format!(
            "frame of {} bytes is too short for a request header",
            frame.len()
        ));
    }
    let request_bytes = frame.len();
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let Ok(api) = ApiKey::try_from(key) else {
        return Outcome::Close(format!("unknown api key {key}"));
    };
    match supported(api, version) {
        None => return Outcome::Close(format!("api {api:?} ({key}) is not supported")),
        Some(false) if api == ApiKey::ApiVersions && version > 0 => {
            return Outcome::Respond(api_versions_too_new(correlation_id).into());
        }
        Some(false) => return Outcome::Close(format!("{api:?} v{version} is not supported")),
        Some(true) => {}
    }
    let header = match RequestHeader::decode(&mut frame, api.request_header_version(version)) {
        Ok(h) => h,
        Err(e) => return Outcome::Close(format!("bad request header for {api:?} v{version}: {e}")),
    };
    let ctx = RequestContext {
        conn,
        api,
        version,
        correlation_id,
        client_id: header.client_id.as_ref().map(|c| c.to_string()),
        request_bytes,
        request_time_counted: Default::default(),
        record_sets: Default::default(),
    };
    let span = tracing::debug_span!(
        "request",
        api = ?api,
        version,
        correlation_id,
        client_id = ctx.client_id.as_deref().unwrap_or(""),
    );
    match call(broker, &ctx, &mut frame).instrument(span).await {
        Ok(Some(bytes)) => Outcome::Respond(bytes),
        Ok(None) => Outcome::NoResponse,
        Err(reason) => Outcome::Close(reason),
    }
}

fn encode_response<T: Encodable>(
    ctx: &RequestContext<'_>,
    response: Option<T>,
) -> Result<Option<Pieces>, String> {
    let Some(response) = response else {
        return Ok(None);
    };
    response_frame(ctx.api, ctx.version, ctx.correlation_id, &response)
        .map(|b| Some(b.into()))
        .map_err(|e| e.to_string())
}

/// A Fetch response references the record sets the log read instead of copying them.
fn encode_fetch(
    ctx: &RequestContext<'_>,
    response: FetchResponse,
) -> Result<Option<Pieces>, String> {
    let records = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.records.clone())
        .collect();
    spliced_response_frame(
        ctx.api,
        ctx.version,
        ctx.correlation_id,
        &response,
        records,
        &ctx.record_sets,
    )
    .map(Some)
    .map_err(|e| e.to_string())
}

/// ApiVersions is the table's own answer.
async fn api_versions(
    broker: &Arc<Broker>,
    _ctx: &RequestContext<'_>,
    _req: ApiVersionsRequest,
) -> ApiVersionsResponse {
    let image = broker.cluster().map(|c| c.image());
    if broker.share_groups_enabled() {
        return handlers::api_versions::handle(APIS, image.as_deref());
    }
    let apis: Vec<(ApiKey, i16, i16)> = APIS
        .iter()
        .filter(|(k, _, _)| !gated_by_feature(*k))
        .copied()
        .collect();
    handlers::api_versions::handle(&apis, image.as_deref())
}

/// The APIs ApiVersions lists only while `share.version` 1 is finalized.
fn gated_by_feature(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::ShareGroupHeartbeat
            | ApiKey::ShareGroupDescribe
            | ApiKey::ShareFetch
            | ApiKey::ShareAcknowledge
            | ApiKey::DescribeShareGroupOffsets
            | ApiKey::AlterShareGroupOffsets
            | ApiKey::DeleteShareGroupOffsets
            | ApiKey::InitializeShareGroupState
            | ApiKey::ReadShareGroupState
            | ApiKey::WriteShareGroupState
            | ApiKey::DeleteShareGroupState
            | ApiKey::ReadShareGroupStateSummary
    )
}

/// The ApiVersions answer for a version newer than ours: v0 body, v0 header, error 35, and
/// our ranges, so the client retries with the highest version we listed.
fn api_versions_too_new(correlation_id: i32) -> Bytes {
    let body = ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(handlers::api_versions::advertised(APIS));
    response_frame(ApiKey::ApiVersions, 0, correlation_id, &body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_within_what_the_crate_can_decode() {
        for (api, min, max) in APIS {
            let mut v = api.valid_versions();
            if let Some((_, newer)) = crate::wire::newer::VERSIONS.iter().find(|(k, _)| k == api) {
                v.max = *newer;
            }
            assert!(
                *max <= v.max,
                "{api:?} max {max} above the crate's {}",
                v.max
            );
            if *api != ApiKey::Produce {
                assert!(
                    *min >= v.min,
                    "{api:?} min {min} below the crate's {}",
                    v.min
                );
            }
        }
    }

    #[test]
    fn versions_librdkafka_pins_are_in_range() {
        for (api, v) in [
            (ApiKey::OffsetForLeaderEpoch, 2),
            (ApiKey::Produce, 0),
            (ApiKey::Fetch, 4),
            (ApiKey::ListOffsets, 1),
            (ApiKey::InitProducerId, 0),
            (ApiKey::ApiVersions, 3),
        ] {
            assert_eq!(supported(api, v), Some(true), "{api:?} v{v}");
        }
    }

    #[test]
    fn too_new_api_versions_is_answered_in_v0() {
        let b = api_versions_too_new(11);
        // length, correlation id, error 35, then the api array.
        assert_eq!(&b[4..8], &11i32.to_be_bytes());
        assert_eq!(&b[8..10], &35i16.to_be_bytes());
        let n = i32::from_be_bytes([b[10], b[11], b[12], b[13]]);
        assert_eq!(n as usize, APIS.len());
    }

    /// Random and mutated frames never panic the broker: each gets an answer or a close.
    /// The clock is paused so fetches that long-poll finish at once.
    #[tokio::test(start_paused = true)]
    async fn random_frames_never_panic() {
        use crate::storage::memory::MemoryStore;
        let store = Arc::new(MemoryStore::default());
        let tmp = tempfile::tempdir().unwrap();
        let config = crate::config::Config::load(
            None,
            Vec::new(),
            &[format!("log.dirs={}", tmp.path().display())],
        )
        .unwrap();
        let dirs = vec![crate::topics::LogDir::new(
            config.log_dirs[0].clone(),
            store.clone(),
        )];
        let broker =
            Broker::with_stores(config, APIS, store.clone(), dirs, store, Vec::new()).unwrap();
        // The metadata quorum of one (its Raft log in the temp dir) decides the topic.
        let dial = crate::dial::Dialer::new(&broker.config).unwrap();
        let cluster = broker.start_cluster(None, dial, None).await.unwrap();
        cluster.await_running().await;
        broker.auto_create("t").await.unwrap();
        let conn = Connection::new(
            "PLAINTEXT".into(),
            "127.0.0.1:1".parse().unwrap(),
            "User:ANONYMOUS".into(),
            None,
        );
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..3000 {
            let len = (next() % 200) as usize;
            let mut frame: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if frame.len() >= 4 {
                // Aim at real APIs and versions most of the time, so bodies get decoded.
                let (api, min, max) = APIS[(next() % APIS.len() as u64) as usize];
                let v = min + (next() % ((max - min + 1) as u64)) as i16;
                frame[0..2].copy_from_slice(&(api as i16).to_be_bytes());
                if i % 4 != 0 {
                    frame[2..4].copy_from_slice(&v.to_be_bytes());
                }
            }
            let _ = handle(&broker, &conn, Bytes::from(frame)).await;
        }
    }
}
