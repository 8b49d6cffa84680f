//! Share-group requests (KIP-932) for tests: join with ShareGroupHeartbeat, fetch and
//! acknowledge partition 0 of a topic.

use cairn::wire::newer::{
    AcquireMode, ShareAcknowledge, ShareAcknowledgeReply, ShareFetch, ShareFetchReply,
};
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatchAck,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{name, Client};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn heartbeat(
    c: &mut Client,
    group: &str,
    member: &str,
    epoch: i32,
    topics: Option<&[&str]>,
) -> ShareGroupHeartbeatResponse {
    let req = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names(topics.map(|t| t.iter().map(|n| name(n)).collect()));
    c.send(ApiKey::ShareGroupHeartbeat, 1, &req)
}

pub fn topic_id(c: &mut Client, topic: &str) -> Uuid {
    let req = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default().with_name(Some(name(topic))),
    ]));
    let r: MetadataResponse = c.send(ApiKey::Metadata, 12, &req);
    r.topics[0].topic_id
}

/// (first, last, types) acknowledgement batches.
pub type Acks<'a> = &'a [(i64, i64, &'a [i8])];

pub fn share_fetch(
    c: &mut Client,
    group: &str,
    member: &str,
    epoch: i32,
    topic: Uuid,
    acks: Acks,
    max_wait_ms: i32,
) -> ShareFetchResponse {
    let req = fetch_request(group, member, epoch, topic, acks)
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(500)
        .with_batch_size(500);
    c.send(ApiKey::ShareFetch, 1, &req)
}

/// ShareFetch v2 with IsRenewAck (KIP-1222): `wait_ms` 0, as a renew request must have (with
/// its other limits), or not, to see it refused.
pub fn renew_fetch(
    c: &mut Client,
    group: &str,
    member: &str,
    epoch: i32,
    topic: Uuid,
    acks: Acks,
    wait_ms: i32,
) -> ShareFetchResponse {
    let req = ShareFetch {
        request: fetch_request(group, member, epoch, topic, acks)
            .with_max_wait_ms(wait_ms)
            .with_max_bytes(0),
        acquire_mode: AcquireMode::BatchOptimized,
        renew_ack: true,
    };
    let r: ShareFetchReply = c.send(ApiKey::ShareFetch, 2, &req);
    r.0
}

pub fn fetch_request(
    group: &str,
    member: &str,
    epoch: i32,
    topic: Uuid,
    acks: Acks,
) -> ShareFetchRequest {
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(topic)
            .with_partitions(vec![FetchPartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(
                    acks.iter()
                        .map(|(f, l, t)| {
                            AcknowledgementBatch::default()
                                .with_first_offset(*f)
                                .with_last_offset(*l)
                                .with_acknowledge_types(t.to_vec())
                        })
                        .collect(),
                )])])
}

pub fn share_ack(
    c: &mut Client,
    group: &str,
    member: &str,
    epoch: i32,
    topic: Uuid,
    acks: Acks,
) -> ShareAcknowledgeResponse {
    c.send(
        ApiKey::ShareAcknowledge,
        1,
        &ack_request(group, member, epoch, topic, acks),
    )
}

/// ShareAcknowledge v2 with IsRenewAck (KIP-1222).
pub fn renew_ack(
    c: &mut Client,
    group: &str,
    member: &str,
    epoch: i32,
    topic: Uuid,
    acks: Acks,
) -> ShareAcknowledgeReply {
    let req = ShareAcknowledge {
        request: ack_request(group, member, epoch, topic, acks),
        renew_ack: true,
    };
    c.send(ApiKey::ShareAcknowledge, 2, &req)
}

fn ack_request(
    group: &str,
    member: &str,
    epoch: i32,
    topic: Uuid,
    acks: Acks,
) -> ShareAcknowledgeRequest {
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_topics(vec![AcknowledgeTopic::default()
            .with_topic_id(topic)
            .with_partitions(vec![AcknowledgePartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(
                    acks.iter()
                        .map(|(f, l, t)| {
                            AckBatchAck::default()
                                .with_first_offset(*f)
                                .with_last_offset(*l)
                                .with_acknowledge_types(t.to_vec())
                        })
                        .collect(),
                )])])
}

/// The acquired ranges of a ShareFetch answer: (first, last, delivery count).
pub fn acquired(r: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| &p.acquired_records)
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect()
}
