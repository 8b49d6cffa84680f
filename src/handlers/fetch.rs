//! Fetch: whole batches from the one containing each fetch offset, long-polling until
//! `min_bytes` are available or `max_wait_ms` passes, woken by appends. Sizes follow KIP-74:
//! the first non-empty partition returns at least one whole batch even past the limits.
//! Fetch sessions are not kept: every answer carries session id 0, which tells clients to
//! keep sending full requests. From v13 (KIP-516) topics are named by id; an id this broker
//! does not know gets UNKNOWN_TOPIC_ID for each of its partitions.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use futures_util::future::{join_all, select_all};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
    PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
use kafka_protocol::protocol::Encodable;

use super::leader_hints::{node_endpoints, Hints};
use super::RequestContext;
use crate::broker::authorizer::denied;
use crate::broker::throttle::Kind;
use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::log::batch::BatchHeader;
use crate::log::ReadUpTo;
use crate::security::acl::{op, resource};
use crate::topics::{Partition, Topic};

/// Upper bound on a fetch's wait, whatever the client asks, so shutdown is never held up.
const FETCH_WAIT_MS_MAX: u64 = 30_000;

struct Wanted {
    topic: usize,
    index: i32,
    partition: Result<Arc<Partition>>,
    /// The topic's counters, when the partition exists.
    metrics: Option<Arc<Topic>>,
    fetch_offset: i64,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
    partition_max_bytes: i32,
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: FetchRequest,
) -> FetchResponse {
    if req.session_id != 0 {
        // We never hand out a session, so any id the client names is unknown to us.
        return FetchResponse::default()
            .with_error_code(Error::FetchSessionIdNotFound(req.session_id).code());
    }
    let replica_id = if ctx.version >= 15 {
        req.replica_state.replica_id
    } else {
        req.replica_id
    };
    // Consumers read committed data (below the HW, or for read_committed below the LSO);
    // follower replicas read to the LEO.
    let committed_only = replica_id.0 < 0;
    let upto = match (committed_only, req.isolation_level) {
        (false, _) => ReadUpTo::LogEnd,
        (true, 1) => ReadUpTo::LastStable,
        (true, _) => ReadUpTo::HighWatermark,
    };

    // Kafka's checks: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on
    // each topic; either refused gets TOPIC_AUTHORIZATION_FAILED per partition.
    let access = ctx.access(broker);
    let follower_denied = !committed_only && !access.allows_cluster(op::CLUSTER_ACTION);
    // Sized up front: with thousands of partitions these are megabytes, and growing them
    // copied each one several times into freshly faulted pages (perf, 10,000 partitions).
    let mut wanted = Vec::with_capacity(req.topics.iter().map(|t| t.partitions.len()).sum());
    for (ti, t) in req.topics.iter().enumerate() {
        let name = match ctx.version >= 13 {
            true => broker.catalog.get_by_id(t.topic_id).map(|t| t.name.clone()),
            false => Some(t.topic.to_string()),
        };
        let denied_topic = name.as_ref().is_some_and(|n| {
            follower_denied || (committed_only && !access.allows(op::READ, resource::TOPIC, n))
        });
        for p in &t.partitions {
            let mut found = match &name {
                _ if denied_topic => Err(denied(resource::TOPIC)),
                Some(name) => broker.catalog.partition(name, p.partition),
                None => Err(Error::UnknownTopicId),
            };
            if let Ok((_, part)) = &found {
                // Only the leader serves fetches (no follower reads); a follower replica's
                // fetch also tells the leader how far that follower has got.
                let checked = broker.check_fetch(part, replica_id.0, p.fetch_offset);
                if let Err(e) = checked {
                    found = Err(e);
                }
            }
            wanted.push(Wanted {
                topic: ti,
                index: p.partition,
                metrics: found.as_ref().ok().map(|(topic, _)| topic.clone()),
                partition: found.map(|(_, part)| part),
                fetch_offset: p.fetch_offset,
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: p.last_fetched_epoch,
                partition_max_bytes: p.partition_max_bytes,
            });
        }
    }
    let wait = Duration::from_millis((req.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MS_MAX));
    let deadline = tokio::time::Instant::now() + wait;
    let min_bytes = req.min_bytes.max(0) as usize;
    let max_bytes = if req.max_bytes <= 0 {
        i32::MAX as usize
    } else {
        req.max_bytes as usize
    };
    // As Kafka: the broker's `fetch.max.bytes` caps what any fetch may ask for.
    let max_bytes = max_bytes.min(broker.config.fetch_response_bytes_max);
    let mut shutdown = broker.shutdown_signal();
    let live: Vec<Arc<Partition>> = wanted
        .iter()
        .filter_map(|w| w.partition.as_ref().ok().cloned())
        .collect();

    loop {
        // Register for wake-ups before looking, so an append between the look and the wait
        // is not missed.
        let mut wakeups: Vec<_> = live
            .iter()
            .map(|p| {
                Box::pin(if committed_only {
                    p.log.hw_moved.notified()
                } else {
                    p.log.appended.notified()
                })
            })
            .collect();
        for w in wakeups.iter_mut() {
            w.as_mut().enable();
        }
        // Only what is left of the broker's fetch memory is read (a fetch granted nothing
        // still gets its first batch), and what is read stays counted until it is sent.
        let grant = broker.fetch_memory.grant(max_bytes);
        let (mut partitions, bytes, errors) = gather(&wanted, grant.bytes, upto).await;
        for (_, _, pieces) in &mut partitions {
            for piece in pieces.iter_mut() {
                *piece = broker.fetch_memory.hold(std::mem::take(piece));
            }
        }
        drop(grant);
        let expired = tokio::time::Instant::now() >= deadline;
        if bytes >= min_bytes || errors || expired || broker.is_shutting_down() {
            let response = respond(broker, ctx, &req, partitions);
            if !committed_only {
                // Followers are held to replication quotas, not clients', and Kafka counts
                // their bytes apart (ReplicationBytesOut).
                return response;
            }
            let size = || response.compute_size(ctx.version).unwrap_or(bytes) as f64;
            let by_bytes = ctx.throttle(broker, Kind::Fetch, size);
            let by_time = ctx.throttle_request(broker);
            let ms = by_bytes.as_ref().map_or(0, |(ms, _, _)| *ms).max(by_time);
            if ms > 0 {
                // As Kafka: a consumer throttled by either quota gets no records, and their
                // bytes no longer count against its byte quota since they are not sent.
                if let Some((_, quota, size)) = by_bytes {
                    let now = crate::clock::now_ms_unsigned();
                    broker.throttles.unrecord(Kind::Fetch, &quota, size, now);
                }
                return FetchResponse::default()
                    .with_throttle_time_ms(ms.min(i32::MAX as u64) as i32);
            }
            count(&wanted, &response);
            return response;
        }
        // select_all panics on an empty set, and select! builds a disabled branch's future
        // anyway, so a fetch of only unknown partitions waits on a future that never ends.
        let appended = async move {
            if wakeups.is_empty() {
                std::future::pending::<()>().await;
            } else {
                select_all(wakeups).await;
            }
        };
        tokio::select! {
            _ = appended => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = crate::shutdown::requested(&mut shutdown) => {}
        }
    }
}

/// Kafka's per-topic fetch counters: requests and failures per partition, bytes sent.
/// The response holds each topic's partitions in the order they were wanted.
fn count(wanted: &[Wanted], response: &FetchResponse) {
    let mut next = vec![0usize; response.responses.len()];
    for w in wanted {
        let Some(p) = response
            .responses
            .get(w.topic)
            .and_then(|t| t.partitions.get(next[w.topic]))
        else {
            continue;
        };
        next[w.topic] += 1;
        let Some(t) = &w.metrics else { continue };
        let m = &t.metrics;
        m.fetch_requests.inc();
        if p.error_code != 0 {
            m.failed_fetch_requests.inc();
        }
        if let Some(r) = &p.records {
            m.bytes_out.inc_by(r.len() as u64);
        }
    }
}

fn respond(
    broker: &Broker,
    ctx: &RequestContext<'_>,
    req: &FetchRequest,
    mut partitions: Vec<(usize, PartitionData, Vec<Bytes>)>,
) -> FetchResponse {
    let version = ctx.version;
    let mut topics: Vec<FetchableTopicResponse> = req
        .topics
        .iter()
        .map(|t| {
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(Vec::with_capacity(t.partitions.len()))
        })
        .collect();
    let mut hints = Hints::new(broker, &ctx.conn.listener);
    for (ti, mut p, pieces) in partitions.drain(..) {
        if !pieces.is_empty() {
            p.records = Some(ctx.record_sets.value_for(pieces));
        }
        if version < 5 {
            // v4 has no log start offset; it must stay at its default to be encodable.
            p.log_start_offset = -1;
        }
        if version >= 16 && p.error_code != 0 {
            let t = &req.topics[ti];
            let topic = match version >= 13 {
                true => broker.catalog.get_by_id(t.topic_id),
                false => broker.catalog.get(t.topic.as_str()),
            };
            if let Some((id, epoch)) =
                hints.leader(topic.as_deref(), p.partition_index, p.error_code)
            {
                p.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(id))
                    .with_leader_epoch(epoch);
            }
        }
        topics[ti].partitions.push(p);
    }
    FetchResponse::default()
        .with_responses(topics)
        .with_node_endpoints(node_endpoints!(hints, NodeEndpoint))
}

/// Reads every wanted partition once; returns the partition answers with their records in
/// pieces, the record bytes gathered and whether any partition answered with an error.
///
/// Partitions are read in waves, each wave's partitions concurrently: a wave takes
/// partitions in request order while their `partition_max_bytes` fit in what is left of
/// `max_bytes`, so no partition's read depends on how much an earlier one of its wave
/// returned. Only KIP-74's one oversized batch can break that; [`trim`] then cuts the
/// answers back to what reading one partition after another would have returned.
async fn gather(
    wanted: &[Wanted],
    max_bytes: usize,
    upto: ReadUpTo,
) -> (Vec<(usize, PartitionData, Vec<Bytes>)>, usize, bool) {
    let mut out = Vec::with_capacity(wanted.len());
    let mut remaining = max_bytes;
    let mut bytes = 0;
    let mut min_one = true;
    let mut any_error = false;
    let mut rest = wanted;
    while !rest.is_empty() {
        let mut n = 0;
        let mut sum = 0usize;
        for w in rest {
            let want = w.partition_max_bytes.max(0) as usize;
            if n > 0 && sum.saturating_add(want) > remaining {
                break;
            }
            sum = sum.saturating_add(want);
            n += 1;
        }
        let (wave, later) = rest.split_at(n);
        rest = later;
        let limit = remaining;
        let answers = join_all(wave.iter().map(|w| read_one(w, limit, min_one, upto))).await;
        for (w, (p, mut pieces, error)) in wave.iter().zip(answers) {
            any_error |= error;
            let limit = (w.partition_max_bytes.max(0) as usize).min(remaining);
            let len = trim(&mut pieces, limit, min_one);
            if len > 0 {
                min_one = false;
                remaining = remaining.saturating_sub(len);
                bytes += len;
            }
            out.push((w.topic, p, pieces));
        }
    }
    (out, bytes, any_error)
}

/// Cuts `pieces` (each whole batches) to the batches that fit in `limit` bytes, keeping the
/// first one anyway when `min_one`; returns the bytes kept.
fn trim(pieces: &mut Vec<Bytes>, limit: usize, min_one: bool) -> usize {
    let mut kept = 0;
    for (i, piece) in pieces.iter_mut().enumerate() {
        if kept + piece.len() <= limit {
            kept += piece.len();
            continue;
        }
        let mut end = 0;
        while let Ok(h) = BatchHeader::parse(&piece[end..]) {
            if kept + end + h.size > limit && (kept + end > 0 || !min_one) {
                break;
            }
            end += h.size;
        }
        piece.truncate(end);
        kept += end;
        let keep = if end > 0 { i + 1 } else { i };
        pieces.truncate(keep);
        break;
    }
    kept
}

/// One partition's answer, read with at most `max_bytes` left for the whole fetch, its
/// records in pieces (the answer's own are empty); and whether it is an error.
async fn read_one(
    w: &Wanted,
    max_bytes: usize,
    min_one: bool,
    upto: ReadUpTo,
) -> (PartitionData, Vec<Bytes>, bool) {
    let read_committed = upto == ReadUpTo::LastStable;
    let base = PartitionData::default()
        .with_partition_index(w.index)
        .with_preferred_read_replica(BrokerId(-1))
        .with_aborted_transactions(read_committed.then(Vec::new));
    let part = match &w.partition {
        Ok(p) => p,
        Err(e) => return (failed(base, e), Vec::new(), true),
    };
    let log = &part.log;
    if let Err(e) = log.check_leader_epoch(w.current_leader_epoch) {
        return (failed(base, &e), Vec::new(), true);
    }
    if w.last_fetched_epoch >= 0 {
        // KIP-320/595: tell a fetcher whose last epoch ended earlier where to truncate.
        let (epoch, end) = log.end_offset_for_epoch(w.last_fetched_epoch);
        if epoch >= 0 && (epoch < w.last_fetched_epoch || end < w.fetch_offset) {
            let o = log.offsets();
            let p = base
                .with_high_watermark(o.high_watermark)
                .with_last_stable_offset(o.last_stable)
                .with_log_start_offset(o.log_start)
                .with_diverging_epoch(
                    EpochEndOffset::default()
                        .with_epoch(epoch)
                        .with_end_offset(end),
                )
                .with_records(Some(Bytes::new()));
            return (p, Vec::new(), true);
        }
    }
    let limit = (w.partition_max_bytes.max(0) as usize).min(max_bytes);
    match log.read_pieces(w.fetch_offset, limit, min_one, upto).await {
        Ok(r) => {
            // Null for read_uncommitted; for read_committed, the aborted transactions the
            // client must drop from these records (entries past the records are harmless).
            let aborted = r.aborted.map(|list| {
                list.into_iter()
                    .map(|(pid, first)| {
                        AbortedTransaction::default()
                            .with_producer_id(pid.into())
                            .with_first_offset(first)
                    })
                    .collect()
            });
            let p = base
                .with_high_watermark(r.high_watermark)
                .with_last_stable_offset(r.last_stable_offset)
                .with_log_start_offset(r.log_start_offset)
                .with_aborted_transactions(aborted)
                .with_records(Some(Bytes::new()));
            (p, r.records, false)
        }
        Err(e) => {
            let o = log.offsets();
            let p = failed(base, &e)
                .with_high_watermark(o.high_watermark)
                .with_last_stable_offset(o.last_stable)
                .with_log_start_offset(o.log_start);
            (p, Vec::new(), true)
        }
    }
}

fn failed(base: PartitionData, e: &Error) -> PartitionData {
    if matches!(e, Error::Storage(_)) {
        tracing::error!(error = %e, "fetch failed in storage");
    }
    base.with_error_code(e.code())
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        // Never null: librdkafka rejects a -1 record set size.
        .with_records(Some(Bytes::new()))
}

#[cfg(test)]
mod tests {
    use super::trim;
    use crate::log::batch::tests::batch;
    use bytes::Bytes;

    /// Three batches, and their lengths.
    fn three() -> (Vec<Bytes>, usize, usize) {
        let a = batch(&[b"one", b"two"], None, 0);
        let b = batch(&[b"three"], None, 0);
        let c = batch(&[b"four"], None, 0);
        let (la, lb) = (a.len(), b.len());
        (vec![a.into(), b.into(), c.into()], la, lb)
    }

    /// The three batches as the reads may hand them over: in one piece, one piece each, or
    /// the first alone and the others together.
    fn shapes() -> Vec<Vec<Bytes>> {
        let (all, _, _) = three();
        vec![
            vec![all.concat().into()],
            all.clone(),
            vec![all[0].clone(), [&all[1][..], &all[2][..]].concat().into()],
        ]
    }

    /// `pieces` trimmed, joined; checks the length `trim` returns.
    fn trimmed(mut pieces: Vec<Bytes>, limit: usize, min_one: bool) -> Vec<u8> {
        let kept = trim(&mut pieces, limit, min_one);
        assert!(pieces.iter().all(|p| !p.is_empty()));
        let joined = pieces.concat();
        assert_eq!(kept, joined.len());
        joined
    }

    #[test]
    fn trim_keeps_the_whole_batches_that_fit() {
        let (batches, la, lb) = three();
        let all = batches.concat();
        for pieces in shapes() {
            assert_eq!(trimmed(pieces.clone(), all.len(), false), all);
            assert_eq!(trimmed(pieces.clone(), la + lb + 1, false), all[..la + lb]);
            assert_eq!(trimmed(pieces, la + lb - 1, true), all[..la]);
        }
    }

    #[test]
    fn trim_keeps_one_oversized_batch_only_when_min_one() {
        let (batches, la, _) = three();
        let all = batches.concat();
        for pieces in shapes() {
            assert_eq!(trimmed(pieces.clone(), la - 1, true), all[..la]);
            assert!(trimmed(pieces, la - 1, false).is_empty());
        }
    }
}
