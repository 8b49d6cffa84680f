//! Fetch: whole batches from the one containing each fetch offset, long-polling until
//! `min_bytes` are available or `max_wait_ms` passes, woken by appends. Sizes follow KIP-74:
//! the first non-empty partition returns at least one whole batch even past the limits.
//! Fetch sessions are not kept: every answer carries session id 0, which tells clients to
//! keep sending full requests. From v13 (KIP-516) topics are named by id; an id this broker
//! does not know gets UNKNOWN_TOPIC_ID for each of its partitions.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select_all;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::log::ReadUpTo;
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

    let mut wanted = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let name = match ctx.version >= 13 {
            true => broker.catalog.get_by_id(t.topic_id).map(|t| t.name.clone()),
            false => Some(t.topic.to_string()),
        };
        for p in &t.partitions {
            let mut found = match &name {
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
        let (partitions, bytes, errors) = gather(&wanted, max_bytes, upto).await;
        let expired = tokio::time::Instant::now() >= deadline;
        if bytes >= min_bytes || errors || expired || broker.is_shutting_down() {
            // Kafka counts follower fetches apart (ReplicationBytesOut); these are clients'.
            if committed_only {
                count(&wanted, &partitions);
            }
            return respond(&req, ctx.version, partitions);
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
fn count(wanted: &[Wanted], answers: &[(usize, PartitionData)]) {
    for (w, (_, p)) in wanted.iter().zip(answers) {
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
    req: &FetchRequest,
    version: i16,
    mut partitions: Vec<(usize, PartitionData)>,
) -> FetchResponse {
    let mut topics: Vec<FetchableTopicResponse> = req
        .topics
        .iter()
        .map(|t| {
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
        })
        .collect();
    for (ti, mut p) in partitions.drain(..) {
        if version < 5 {
            // v4 has no log start offset; it must stay at its default to be encodable.
            p.log_start_offset = -1;
        }
        topics[ti].partitions.push(p);
    }
    FetchResponse::default().with_responses(topics)
}

/// Reads every wanted partition once; returns the partition answers, the record bytes
/// gathered and whether any partition answered with an error.
async fn gather(
    wanted: &[Wanted],
    max_bytes: usize,
    upto: ReadUpTo,
) -> (Vec<(usize, PartitionData)>, usize, bool) {
    let read_committed = upto == ReadUpTo::LastStable;
    let mut out = Vec::with_capacity(wanted.len());
    let mut remaining = max_bytes;
    let mut min_one = true;
    let mut any_error = false;
    for w in wanted {
        let base = PartitionData::default()
            .with_partition_index(w.index)
            .with_preferred_read_replica(BrokerId(-1))
            .with_aborted_transactions(read_committed.then(Vec::new));
        let part = match &w.partition {
            Ok(p) => p,
            Err(e) => {
                any_error = true;
                out.push((w.topic, failed(base, e)));
                continue;
            }
        };
        let log = &part.log;
        if let Err(e) = log.check_leader_epoch(w.current_leader_epoch) {
            any_error = true;
            out.push((w.topic, failed(base, &e)));
            continue;
        }
        if w.last_fetched_epoch >= 0 {
            // KIP-320/595: tell a fetcher whose last epoch ended earlier where to truncate.
            let (epoch, end) = log.end_offset_for_epoch(w.last_fetched_epoch);
            if epoch >= 0 && (epoch < w.last_fetched_epoch || end < w.fetch_offset) {
                let o = log.offsets();
                out.push((
                    w.topic,
                    base.with_high_watermark(o.high_watermark)
                        .with_last_stable_offset(o.last_stable)
                        .with_log_start_offset(o.log_start)
                        .with_diverging_epoch(
                            EpochEndOffset::default()
                                .with_epoch(epoch)
                                .with_end_offset(end),
                        )
                        .with_records(Some(bytes::Bytes::new())),
                ));
                any_error = true;
                continue;
            }
        }
        let limit = (w.partition_max_bytes.max(0) as usize).min(remaining);
        match log.read(w.fetch_offset, limit, min_one, upto).await {
            Ok(r) => {
                if !r.records.is_empty() {
                    min_one = false;
                    remaining = remaining.saturating_sub(r.records.len());
                }
                // Null for read_uncommitted; for read_committed, the aborted transactions
                // the client must drop from these records.
                let aborted = r.aborted.map(|list| {
                    list.into_iter()
                        .map(|(pid, first)| {
                            AbortedTransaction::default()
                                .with_producer_id(pid.into())
                                .with_first_offset(first)
                        })
                        .collect()
                });
                out.push((
                    w.topic,
                    base.with_high_watermark(r.high_watermark)
                        .with_last_stable_offset(r.last_stable_offset)
                        .with_log_start_offset(r.log_start_offset)
                        .with_aborted_transactions(aborted)
                        .with_records(Some(r.records)),
                ));
            }
            Err(e) => {
                any_error = true;
                let o = log.offsets();
                out.push((
                    w.topic,
                    failed(base, &e)
                        .with_high_watermark(o.high_watermark)
                        .with_last_stable_offset(o.last_stable)
                        .with_log_start_offset(o.log_start),
                ));
            }
        }
    }
    let bytes = max_bytes - remaining;
    (out, bytes, any_error)
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
        .with_records(Some(bytes::Bytes::new()))
}
