//! A follower's fetcher: one per leader broker, one connection, Fetch v12 requests carrying
//! this broker's replica id for every partition it follows from that leader. Each answer is
//! applied per partition: truncate where the leader says the log diverges, else append the
//! batches as they are and take the leader's HW (capped at the local LEO).

use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::watch;

use super::{FetchWork, Node};
use crate::dial::Stream;
use crate::log::PartitionLog;
use crate::shutdown;
use crate::wire::frame::FrameReader;
use crate::wire::{self, topic_name};

const FETCH_VERSION: i16 = 12;
const WAIT_MS_MAX: i32 = 500;
const PARTITION_BYTES_MAX: i32 = 1 << 20;
const FETCH_BYTES_MAX: i32 = 16 << 20;
/// The largest answer frame accepted: the leader may exceed the requested maximum by one
/// batch (Kafka returns at least one whole batch), so leave it room.
const ANSWER_BYTES_MAX: usize = 2 * FETCH_BYTES_MAX as usize;

/// A connection to the leader: its address, the frame reader over its read half (which
/// allocates a response's memory as its bytes arrive), and the write half.
struct Conn {
    addr: String,
    frames: FrameReader<ReadHalf<Stream>>,
    out: WriteHalf<Stream>,
    /// When to log in again, if the leader gave the session a lifetime (KIP-368).
    log_in_again: Option<Instant>,
}

pub(super) async fn run(node: Node, leader: i32, mut work: watch::Receiver<FetchWork>) {
    let mut shutdown = node.shutdown.clone();
    let mut conn: Option<Conn> = None;
    let mut correlation = 0i32;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let w = work.borrow_and_update().clone();
        if w.partitions.is_empty() {
            conn = None;
            tokio::select! {
                r = work.changed() => if r.is_err() { return },
                _ = shutdown::requested(&mut shutdown) => return,
            }
            continue;
        }
        if conn.as_ref().is_none_or(|c| c.addr != w.addr) {
            match node.dial.connect_for_long(&w.addr).await {
                Ok((s, log_in_again)) => {
                    let (rd, out) = tokio::io::split(s);
                    conn = Some(Conn {
                        addr: w.addr.clone(),
                        frames: FrameReader::new(rd, ANSWER_BYTES_MAX),
                        out,
                        log_in_again,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    // A refused certificate or login: said at every try, a second apart.
                    tracing::warn!(leader, error = %e, "cannot log in to the leader");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = shutdown::requested(&mut shutdown) => return,
                    }
                    continue;
                }
                Err(e) => {
                    tracing::debug!(leader, addr = %w.addr, error = %e, "cannot reach the leader");
                    pause(&mut shutdown).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else {
            continue;
        };
        if c.log_in_again.is_some_and(|t| Instant::now() >= t) {
            let again = tokio::select! {
                r = tokio::time::timeout(
                    Duration::from_secs(30),
                    node.dial.log_in_again(&c.addr, &mut c.frames, &mut c.out),
                ) => r,
                _ = shutdown::requested(&mut shutdown) => return,
            };
            match again {
                Ok(Ok(t)) => c.log_in_again = t,
                // Dial again: a login the leader refuses is reported there.
                failed => {
                    tracing::debug!(leader, ?failed, "logging in to the leader again failed");
                    conn = None;
                    continue;
                }
            }
        }
        correlation = correlation.wrapping_add(1);
        let req = request(node.id(), &w);
        let answer = tokio::select! {
            r = tokio::time::timeout(Duration::from_secs(30), call(c, correlation, &req)) => r,
            _ = shutdown::requested(&mut shutdown) => return,
        };
        let resp = match answer {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::debug!(leader, error = %e, "fetch from the leader failed");
                conn = None;
                pause(&mut shutdown).await;
                continue;
            }
            Err(_) => {
                conn = None;
                continue;
            }
        };
        if !apply(&w, resp).await {
            // Errors only (a leader change under way): let metadata catch up.
            pause(&mut shutdown).await;
        }
    }
}

async fn pause(shutdown: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        _ = shutdown::requested(shutdown) => {}
    }
}

fn request(me: i32, w: &FetchWork) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for f in &w.partitions {
        let o = f.partition.log.offsets();
        let part = FetchPartition::default()
            .with_partition(f.partition.index)
            .with_current_leader_epoch(f.leader_epoch)
            .with_fetch_offset(o.log_end)
            .with_last_fetched_epoch(f.partition.log.latest_epoch())
            .with_log_start_offset(o.log_start)
            .with_partition_max_bytes(PARTITION_BYTES_MAX);
        match topics.iter_mut().find(|t| t.topic.0.as_str() == f.topic) {
            Some(t) => t.partitions.push(part),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(topic_name(&f.topic))
                    .with_partitions(vec![part]),
            ),
        }
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(me))
        .with_max_wait_ms(WAIT_MS_MAX)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_BYTES_MAX)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics)
}

async fn call(c: &mut Conn, correlation: i32, req: &FetchRequest) -> anyhow::Result<FetchResponse> {
    let frame = wire::request_frame(
        ApiKey::Fetch,
        FETCH_VERSION,
        correlation,
        "cairn-replica-fetcher",
        req,
    )?;
    c.out.write_all(&frame).await?;
    let answer = c
        .frames
        .next()
        .await?
        .ok_or_else(|| anyhow::anyhow!("the leader closed the connection"))?;
    Ok(wire::decode_response(
        ApiKey::Fetch,
        FETCH_VERSION,
        correlation,
        answer,
    )?)
}

/// Applies one answer to the partitions `w` follows; true when any partition made progress
/// or had nothing new.
async fn apply(w: &FetchWork, resp: FetchResponse) -> bool {
    apply_answer(resp, |topic, index| {
        w.partitions
            .iter()
            .find(|f| f.topic == topic && f.partition.index == index)
            .map(|f| &f.partition.log)
    })
    .await
}

/// Applies a leader's Fetch answer to the logs `log_of(topic, partition)` finds (others are
/// skipped): truncate where the leader says the log diverges or the fetch offset is out of
/// range, else append the batches as they are and take the leader's HW. True when any
/// partition made progress or had nothing new.
pub async fn apply_answer<'a>(
    resp: FetchResponse,
    log_of: impl Fn(&str, i32) -> Option<&'a PartitionLog>,
) -> bool {
    if resp.error_code != 0 {
        return false;
    }
    let mut fine = false;
    for t in resp.responses {
        for pd in t.partitions {
            let Some(log) = log_of(t.topic.0.as_str(), pd.partition_index) else {
                continue;
            };
            if pd.error_code != 0 {
                if pd.error_code == ResponseError::OffsetOutOfRange.code() {
                    let leo = log.offsets().log_end;
                    let result = if pd.log_start_offset > leo {
                        log.reset_to(pd.log_start_offset).await
                    } else {
                        log.truncate_to(pd.high_watermark.max(0)).await
                    };
                    if let Err(e) = result {
                        tracing::error!(partition = pd.partition_index, error = %e, "cannot realign with the leader");
                    }
                } else {
                    tracing::debug!(topic = %t.topic.0.as_str(), partition = pd.partition_index, code = pd.error_code, "fetch error from the leader");
                }
                continue;
            }
            if pd.diverging_epoch.epoch >= 0 {
                let div = &pd.diverging_epoch;
                let (epoch, end) = log.end_offset_for_epoch(div.epoch);
                // Our end of the leader's diverging epoch (or of the latest epoch before it),
                // never past the leader's end; with no epoch that old, nothing of ours is
                // known to the leader. Truncating too far only costs a re-fetch.
                let target = if epoch >= 0 {
                    end.min(div.end_offset)
                } else {
                    log.offsets().log_start
                };
                if let Err(e) = log.truncate_to(target).await {
                    tracing::error!(partition = pd.partition_index, error = %e, "truncation failed");
                }
                // Not counted as progress: should a truncation change nothing, the next
                // fetch waits a little instead of spinning.
                continue;
            }
            fine = true;
            if let Some(records) = pd.records.as_ref().filter(|r| !r.is_empty()) {
                if let Err(e) = log.append_replica(records).await {
                    tracing::error!(topic = %t.topic.0.as_str(), partition = pd.partition_index, error = %e, "appending fetched batches failed");
                    continue;
                }
            }
            log.advance_hw(pd.high_watermark);
        }
    }
    fine
}
