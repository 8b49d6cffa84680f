//! ShareFetch and ShareAcknowledge (KIP-932): a share group member's reads and
//! acknowledgements on the partitions this broker leads. The request first steps the
//! member's share session ([`crate::share::Shares::session`]), then applies the
//! acknowledgements it carries, then (ShareFetch) acquires records: it reads whole batches
//! from where the share partition has something to give, and the share partition decides
//! which of their records this member gets. The answer carries those batches and the
//! acquired offset ranges; the client delivers only the records in them.
//!
//! Like Fetch it long-polls: until some record is acquired, `MaxWaitMs` passes, or the
//! broker shuts down, woken by appends and by records given back.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select_all;
use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch as AckLeader, NodeEndpoint as AckNodeEndpoint,
    PartitionData as AckPartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::leader_hints::{node_endpoints, Hints};
use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::Error;
use crate::group_config::{GroupSettings, OffsetReset};
use crate::log::batch::BatchHeader;
use crate::log::ReadUpTo;
use crate::share::partition::{AckError, Limits};
use crate::share::{SessionStep, TopicIdPartition};
use crate::topics::Partition;
use crate::wire::newer::{
    AcquireMode, LaidOutAs, ShareAcknowledge, ShareAcknowledgeReply, ShareFetch, ShareFetchReply,
};

/// Upper bound on a share fetch's wait, whatever the client asks.
const SHARE_FETCH_WAIT_MS_MAX: u64 = 30_000;

/// An acknowledgement batch: first offset, last offset, types.
type AckBatch = (i64, i64, Vec<i8>);

fn ack_error(e: &AckError) -> (ResponseError, String) {
    match e {
        AckError::NotAcquired(o) => (
            ResponseError::InvalidRecordState,
            format!("The record at offset {o} is not acquired by this member."),
        ),
        AckError::Invalid(msg) => (ResponseError::InvalidRequest, msg.to_string()),
    }
}

/// A partition named by topic id, as this broker can serve it (or why not).
fn resolve(broker: &Broker, tp: TopicIdPartition) -> Result<Arc<Partition>, Error> {
    let topic = broker
        .catalog
        .get_by_id(tp.0)
        .ok_or(Error::UnknownTopicId)?;
    let part = topic
        .partition(tp.1)
        .cloned()
        .ok_or(Error::UnknownTopicOrPartition)?;
    broker.check_fetch(&part, -1, 0)?;
    Ok(part)
}

/// The checks both APIs make before touching a session: the top-level error, if any.
/// Kafka's check of ShareFetch and ShareAcknowledge: READ on the share group.
fn may_read(broker: &Broker, ctx: &RequestContext<'_>, group: &str) -> bool {
    use crate::security::acl::{op, resource};
    ctx.access(broker).allows(op::READ, resource::GROUP, group)
}

fn check_request(
    broker: &Broker,
    group: Option<&str>,
    member: Option<&str>,
) -> Result<(String, String), (ResponseError, String)> {
    if !broker.share_groups_enabled() {
        return Err((
            ResponseError::UnsupportedVersion,
            "Share groups are not enabled (feature share.version is 0).".into(),
        ));
    }
    let group = group.filter(|g| !g.is_empty()).ok_or((
        ResponseError::InvalidRequest,
        "GroupId must be set.".to_string(),
    ))?;
    let member = member.filter(|m| !m.is_empty()).ok_or((
        ResponseError::InvalidRequest,
        "MemberId must be set.".to_string(),
    ))?;
    Ok((group.to_string(), member.to_string()))
}

/// Applies one partition's acknowledgement batches and writes the state they leave: the
/// AcknowledgeErrorCode to answer. `renew`: the request is a renew request (KIP-1222), the
/// only kind that may carry RENEW acknowledgements.
async fn apply_acks(
    broker: &Broker,
    group: &str,
    member: &str,
    tp: TopicIdPartition,
    batches: &[AckBatch],
    renew: bool,
    settings: &GroupSettings,
) -> Option<(ResponseError, String)> {
    if batches.is_empty() {
        return None;
    }
    if let Err(e) = resolve(broker, tp) {
        return Some((e.response_error(), e.to_string()));
    }
    if renew && !settings.share_renew_enabled {
        return Some((
            ResponseError::InvalidRecordState,
            "Renewing acquisition locks is not enabled for the group.".into(),
        ));
    }
    if let Err(e) = broker
        .shares
        .acknowledge(group, member, tp, batches, renew, now_ms())
    {
        return Some(ack_error(&e));
    }
    broker.shares.persist(group, tp).await.err().map(|e| {
        (
            e,
            "The share partition's state could not be written.".to_string(),
        )
    })
}

pub async fn fetch(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ShareFetch,
) -> ShareFetchReply {
    LaidOutAs(share_fetch(broker, ctx, req).await)
}

async fn share_fetch(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ShareFetch,
) -> ShareFetchResponse {
    let ShareFetch {
        request: req,
        acquire_mode,
        renew_ack,
    } = req;
    let top = |e: ResponseError, msg: String| {
        ShareFetchResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(msg)))
    };
    let (group, member) = match check_request(
        broker,
        req.group_id.as_ref().map(|g| g.as_str()),
        req.member_id.as_ref().map(|m| m.as_str()),
    ) {
        Ok(ok) => ok,
        Err((e, msg)) => return top(e, msg),
    };
    // Kafka's check: READ on the share group.
    if !may_read(broker, ctx, &group) {
        let e = ResponseError::GroupAuthorizationFailed;
        return top(e, e.to_string());
    }
    if renew_ack
        && (
            req.max_bytes,
            req.min_bytes,
            req.max_records,
            req.max_wait_ms,
        ) != (0, 0, 0, 0)
    {
        return top(
            ResponseError::InvalidRequest,
            "MaxBytes, MinBytes, MaxRecords and MaxWaitMs must be 0 when IsRenewAck is set.".into(),
        );
    }
    let epoch = req.share_session_epoch;
    let mut wanted: Vec<(TopicIdPartition, Vec<AckBatch>)> = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            let acks = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect();
            wanted.push(((t.topic_id, p.partition_index), acks));
        }
    }
    let has_acks = wanted.iter().any(|(_, a)| !a.is_empty());
    if epoch == 0 && has_acks {
        return top(
            ResponseError::InvalidRequest,
            "Acknowledge data is present on the initial share fetch request.".into(),
        );
    }
    let forgotten: Vec<TopicIdPartition> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let added: Vec<TopicIdPartition> = wanted.iter().map(|(tp, _)| *tp).collect();
    let conn = (ctx.conn.listener.clone(), ctx.conn.peer);
    let step = match broker
        .shares
        .session(&group, &member, epoch, &added, &forgotten, &conn)
    {
        Ok(s) => s,
        Err((e, msg)) => return top(e, msg),
    };

    // Acknowledgements first: what they release may be fetched by this same request.
    let settings = broker.group_settings(&group);
    let mut answers: Vec<(TopicIdPartition, PartitionData)> = Vec::new();
    for (tp, acks) in &wanted {
        if acks.is_empty() {
            continue;
        }
        let mut p = PartitionData::default().with_partition_index(tp.1);
        if let Some((e, msg)) =
            apply_acks(broker, &group, &member, *tp, acks, renew_ack, &settings).await
        {
            p = p
                .with_acknowledge_error_code(e.code())
                .with_acknowledge_error_message(Some(str_bytes(msg)));
        }
        answers.push((*tp, p));
    }
    let lock_ms = settings.share_record_lock_ms as i32;
    if step == SessionStep::Close {
        broker.shares.close_session(&group, &member);
        return respond(broker, ctx, answers, lock_ms);
    }
    // A renew request only renews: it fetches nothing.
    if renew_ack {
        return respond(broker, ctx, answers, lock_ms);
    }
    let split = acquire_mode == AcquireMode::RecordLimit;

    let mut partitions = broker.shares.session_partitions(&group, &member);
    // Each request starts at another of the session's partitions, by its epoch (Kafka's
    // round-robin `PartitionRotateStrategy`): a partition with a backlog of at least
    // MaxRecords would otherwise fill every answer and starve the partitions after it.
    if !partitions.is_empty() {
        let by = epoch.max(0) as usize % partitions.len();
        partitions.rotate_left(by);
    }
    let wait = Duration::from_millis((req.max_wait_ms.max(0) as u64).min(SHARE_FETCH_WAIT_MS_MAX));
    let deadline = tokio::time::Instant::now() + wait;
    // MaxBytes 0 fetches nothing, as in Kafka (librdkafka's 0180 pins this, "as the Java
    // client": `fetch.max.bytes=0` is accepted and polls come back empty).
    // The broker's `fetch.max.bytes` caps it, as for Fetch.
    let max_bytes = (req.max_bytes.max(0) as usize).min(broker.config.fetch_response_bytes_max);
    let max_records = if req.max_records <= 0 {
        500
    } else {
        req.max_records as usize
    };
    let mut shutdown = broker.shutdown_signal();
    loop {
        let live: Vec<Arc<Partition>> = partitions
            .iter()
            .filter_map(|tp| resolve(broker, *tp).ok())
            .collect();
        let mut wakeups: Vec<_> = live
            .iter()
            .map(|p| Box::pin(p.log.hw_moved.notified()))
            .collect();
        let mut released = Box::pin(broker.shares.released.notified());
        released.as_mut().enable();
        for w in wakeups.iter_mut() {
            w.as_mut().enable();
        }
        // As Fetch: only what is left of the broker's fetch memory (but at least the first
        // batch, unless MaxBytes is 0), counted until sent.
        let grant = broker.fetch_memory.grant(max_bytes);
        let budget = grant.bytes.max(max_bytes.min(1));
        let (mut got, errors) = acquire_all(
            broker,
            &group,
            &member,
            &settings,
            &partitions,
            budget,
            max_records,
            split,
        )
        .await;
        for (_, p) in &mut got {
            p.records = p.records.take().map(|r| broker.fetch_memory.hold(r));
        }
        drop(grant);
        let expired = tokio::time::Instant::now() >= deadline;
        if !got.is_empty() || errors || expired || broker.is_shutting_down() {
            for (tp, p) in got {
                match answers.iter_mut().find(|(t, _)| *t == tp) {
                    Some((_, a)) => {
                        a.error_code = p.error_code;
                        a.error_message = p.error_message;
                        a.records = p.records;
                        a.acquired_records = p.acquired_records;
                    }
                    None => answers.push((tp, p)),
                }
            }
            return respond(broker, ctx, answers, lock_ms);
        }
        let appended = async move {
            wakeups.push(released);
            select_all(wakeups).await;
        };
        tokio::select! {
            _ = appended => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = crate::shutdown::requested(&mut shutdown) => {}
        }
    }
}

/// One pass over the session's partitions: what this member acquired on each (partitions
/// that gave nothing are left out), and whether any partition answered with an error.
/// `split`: at most `max_records` records, splitting batches (KIP-1206's `record_limit`).
#[allow(clippy::too_many_arguments)]
async fn acquire_all(
    broker: &Arc<Broker>,
    group: &str,
    member: &str,
    settings: &GroupSettings,
    partitions: &[TopicIdPartition],
    max_bytes: usize,
    max_records: usize,
    split: bool,
) -> (Vec<(TopicIdPartition, PartitionData)>, bool) {
    let mut out = Vec::new();
    let mut any_error = false;
    let mut bytes_left = max_bytes;
    let mut records_left = max_records;
    for &tp in partitions {
        if records_left == 0 || bytes_left == 0 {
            break;
        }
        let base = PartitionData::default().with_partition_index(tp.1);
        let part = match resolve(broker, tp) {
            Ok(p) => p,
            Err(e) => {
                any_error = true;
                out.push((
                    tp,
                    base.with_error_code(e.code())
                        .with_error_message(Some(str_bytes(e.to_string()))),
                ));
                continue;
            }
        };
        let o = part.log.offsets();
        if let Err(e) = load(broker, group, tp, &part, settings).await {
            any_error = true;
            out.push((tp, base.with_error_code(e.code())));
            continue;
        }
        // `share.isolation.level=read_committed` reads up to the last stable offset.
        let (upto, readable) = match settings.share_read_committed {
            true => (ReadUpTo::LastStable, o.last_stable),
            false => (ReadUpTo::HighWatermark, o.high_watermark),
        };
        let Some(from) = broker
            .shares
            .next_read(group, tp, o.log_start, readable, now_ms())
        else {
            continue;
        };
        if from >= readable {
            continue;
        }
        let (read, aborted) = match part.log.read(from, bytes_left, out.is_empty(), upto).await {
            Ok(r) => (r.records, r.aborted.unwrap_or_default()),
            // The log start moved under us: the next pass starts from it.
            Err(Error::OffsetOutOfRange { .. }) => continue,
            Err(e) => {
                any_error = true;
                out.push((tp, base.with_error_code(e.code())));
                continue;
            }
        };
        let mut batches = Vec::new();
        let mut headers = Vec::new();
        let mut pos = 0;
        while let Ok(h) = BatchHeader::parse(&read[pos..]) {
            batches.push((
                pos,
                h.base_offset,
                h.base_offset + h.last_offset_delta as i64,
                h.size,
            ));
            pos += h.size;
            headers.push(h);
        }
        let ranges: Vec<(i64, i64)> = batches.iter().map(|b| (b.1, b.2)).collect();
        let passed_over = aborted_batches(&headers, &aborted);
        let acquired = broker.shares.acquire(
            group,
            member,
            tp,
            &ranges,
            &passed_over,
            records_left,
            split,
            now_ms(),
        );
        let (Some(first), Some(last)) = (acquired.first(), acquired.last()) else {
            continue;
        };
        // Send the batches from the one holding the first acquired record to the one
        // holding the last.
        let start = batches
            .iter()
            .find(|b| b.2 >= first.first)
            .map_or(0, |b| b.0);
        let end = batches
            .iter()
            .find(|b| b.2 >= last.last)
            .map_or(read.len(), |b| b.0 + b.3);
        let records = read.slice(start..end);
        let n: i64 = acquired.iter().map(|a| a.last - a.first + 1).sum();
        records_left = records_left.saturating_sub(n as usize);
        bytes_left = bytes_left.saturating_sub(records.len());
        let acquired = acquired
            .iter()
            .map(|a| {
                AcquiredRecords::default()
                    .with_first_offset(a.first)
                    .with_last_offset(a.last)
                    .with_delivery_count(a.deliveries)
            })
            .collect();
        out.push((
            tp,
            base.with_records(Some(records))
                .with_acquired_records(acquired),
        ));
    }
    (out, any_error)
}

/// The first offsets of the data batches of aborted transactions among `batches`, given
/// the aborted transactions (producer id, first offset) a `read_committed` read returned:
/// a producer's batches are aborted from its transaction's first offset until its abort
/// marker, as a `read_committed` consumer reads them.
fn aborted_batches(batches: &[BatchHeader], aborted: &[(i64, i64)]) -> Vec<i64> {
    let mut pending: Vec<(i64, i64)> = aborted.to_vec();
    pending.sort_by_key(|a| a.1);
    let mut pending = pending.into_iter().peekable();
    let mut open = std::collections::HashSet::new();
    let mut out = Vec::new();
    for h in batches {
        let last = h.base_offset + h.last_offset_delta as i64;
        while let Some((pid, _)) = pending.next_if(|a| a.1 <= last) {
            open.insert(pid);
        }
        if h.is_control() {
            open.remove(&h.producer_id);
        } else if h.is_transactional() && open.contains(&h.producer_id) {
            out.push(h.base_offset);
        }
    }
    out
}

fn respond(
    broker: &Broker,
    ctx: &RequestContext<'_>,
    answers: Vec<(TopicIdPartition, PartitionData)>,
    lock_ms: i32,
) -> ShareFetchResponse {
    let mut topics: Vec<ShareFetchableTopicResponse> = Vec::new();
    let mut hints = Hints::new(broker, &ctx.conn.listener);
    for (tp, p) in answers {
        let topic = tp.0;
        // Never null: clients read the record set's size.
        let mut p = match p.records {
            Some(_) => p,
            None => p.with_records(Some(bytes::Bytes::new())),
        };
        let t = broker.catalog.get_by_id(tp.0);
        if let Some((id, epoch)) = hints.leader(t.as_deref(), tp.1, p.error_code) {
            p.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(id)
                .with_leader_epoch(epoch);
        }
        match topics.iter_mut().find(|t| t.topic_id == topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                ShareFetchableTopicResponse::default()
                    .with_topic_id(topic)
                    .with_partitions(vec![p]),
            ),
        }
    }
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(lock_ms)
        .with_responses(topics)
        .with_node_endpoints(node_endpoints!(hints, NodeEndpoint))
}

pub async fn acknowledge(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ShareAcknowledge,
) -> ShareAcknowledgeReply {
    let ShareAcknowledge {
        request: req,
        renew_ack,
    } = req;
    let reply = |response: ShareAcknowledgeResponse, lock_ms: i64| ShareAcknowledgeReply {
        response,
        acquisition_lock_timeout_ms: lock_ms as i32,
    };
    let top = |e: ResponseError, msg: String| {
        reply(
            ShareAcknowledgeResponse::default()
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(msg))),
            0,
        )
    };
    let (group, member) = match check_request(
        broker,
        req.group_id.as_ref().map(|g| g.as_str()),
        req.member_id.as_ref().map(|m| m.as_str()),
    ) {
        Ok(ok) => ok,
        Err((e, msg)) => return top(e, msg),
    };
    // Kafka's check: READ on the share group.
    if !may_read(broker, ctx, &group) {
        let e = ResponseError::GroupAuthorizationFailed;
        return top(e, e.to_string());
    }
    if req.share_session_epoch == 0 {
        return top(
            ResponseError::InvalidShareSessionEpoch,
            "A share session cannot be opened by ShareAcknowledge.".into(),
        );
    }
    let conn = (ctx.conn.listener.clone(), ctx.conn.peer);
    let step =
        match broker
            .shares
            .session(&group, &member, req.share_session_epoch, &[], &[], &conn)
        {
            Ok(s) => s,
            Err((e, msg)) => return top(e, msg),
        };
    let settings = broker.group_settings(&group);
    let mut topics: Vec<ShareAcknowledgeTopicResponse> = Vec::new();
    let mut hints = Hints::new(broker, &ctx.conn.listener);
    for t in &req.topics {
        let topic = broker.catalog.get_by_id(t.topic_id);
        let mut parts = Vec::new();
        for p in &t.partitions {
            let acks: Vec<AckBatch> = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect();
            let mut answer = AckPartitionData::default().with_partition_index(p.partition_index);
            if let Some((e, msg)) = apply_acks(
                broker,
                &group,
                &member,
                (t.topic_id, p.partition_index),
                &acks,
                renew_ack,
                &settings,
            )
            .await
            {
                answer = answer
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(msg)));
            }
            if let Some((id, epoch)) =
                hints.leader(topic.as_deref(), p.partition_index, answer.error_code)
            {
                answer.current_leader = AckLeader::default()
                    .with_leader_id(id)
                    .with_leader_epoch(epoch);
            }
            parts.push(answer);
        }
        topics.push(
            ShareAcknowledgeTopicResponse::default()
                .with_topic_id(t.topic_id)
                .with_partitions(parts),
        );
    }
    if step == SessionStep::Close {
        broker.shares.close_session(&group, &member);
    }
    let endpoints = node_endpoints!(hints, AckNodeEndpoint);
    reply(
        ShareAcknowledgeResponse::default()
            .with_responses(topics)
            .with_node_endpoints(endpoints),
        settings.share_record_lock_ms,
    )
}

/// Makes `group`'s share partition `tp` of `part` (led here) ready to serve, under the
/// group's settings as they are now.
pub(crate) async fn load(
    broker: &Broker,
    group: &str,
    tp: TopicIdPartition,
    part: &Partition,
    settings: &GroupSettings,
) -> Result<(), ResponseError> {
    let limits = Limits {
        lock_ms: settings.share_record_lock_ms,
        delivery_count_limit: settings.share_delivery_count_limit,
        max_record_locks: settings.share_partition_max_record_locks,
    };
    let start = start_offset(part, settings.share_auto_offset_reset);
    let leader_epoch = part.placement().leader_epoch;
    broker
        .shares
        .load(group, tp, leader_epoch, limits, start)
        .await
}

/// Where a share group starts on a partition it never read, as `share.auto.offset.reset`
/// says: the log start, the high watermark, or the first record at most the given age
/// (the high watermark when none is that recent, as Kafka's reset by duration does).
async fn start_offset(part: &Partition, reset: OffsetReset) -> i64 {
    let o = part.log.offsets();
    match reset {
        OffsetReset::Earliest => o.log_start,
        OffsetReset::Latest => o.high_watermark,
        OffsetReset::ByDuration(age) => {
            let since = now_ms() - age.as_millis() as i64;
            match part
                .log
                .offset_for_timestamp(since, ReadUpTo::HighWatermark)
                .await
            {
                Ok(Some((offset, _))) => offset,
                _ => o.high_watermark,
            }
        }
    }
}
