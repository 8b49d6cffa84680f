//! Share groups' membership (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe. The
//! coordinator assigns partitions by name; the wire names topics by id. A share partition
//! this broker leads is made as soon as the group is assigned it, with its start offset
//! from `share.auto.offset.reset` (latest), as Kafka initializes share partitions on
//! assignment: records written after a member was assigned the partition are delivered.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::share_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member,
    TopicPartitions as DescribedTopicPartitions,
};
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::consumer_groups::by_topic;
use super::RequestContext;
use super::{group_described, str_bytes, topic_name};
use crate::broker::authorizer::Access;
use crate::broker::Broker;
use crate::coordinator::consumer::Tp;
use crate::coordinator::share::{ShareHeartbeat, ShareTopics};
use crate::security::acl::{op, resource};
use crate::topics::Catalog;
use crate::wire::newer::{LaidOutAs, ShareGroupOffsets, ShareGroupOffsetsReply};

struct CatalogView<'a>(&'a Catalog);

impl ShareTopics for CatalogView<'_> {
    fn partitions(&self, topic: &str) -> Option<i32> {
        // Kafka's share groups never consume internal topics.
        if topic.starts_with("__") {
            return None;
        }
        self.0.get(topic).map(|t| t.partitions.len() as i32)
    }
}

fn error_response(e: ResponseError, msg: impl Into<String>) -> ShareGroupHeartbeatResponse {
    ShareGroupHeartbeatResponse::default()
        .with_error_code(e.code())
        .with_error_message(Some(str_bytes(msg.into())))
}

pub async fn heartbeat(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ShareGroupHeartbeatRequest,
) -> ShareGroupHeartbeatResponse {
    if !broker.share_groups_enabled() {
        return error_response(
            ResponseError::UnsupportedVersion,
            "Share groups are not enabled (feature share.version is 0).",
        );
    }
    if req.group_id.is_empty() {
        return error_response(ResponseError::InvalidRequest, "GroupId can't be empty.");
    }
    // Kafka's check: READ on the share group.
    let access = ctx.access(broker);
    if !access.allows(op::READ, resource::GROUP, &req.group_id) {
        let e = ResponseError::GroupAuthorizationFailed;
        return error_response(e, e.to_string());
    }
    let settings = broker.group_settings(&req.group_id);
    let h = ShareHeartbeat {
        member_id: req.member_id.to_string(),
        epoch: req.member_epoch,
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        client_id: ctx.client_id.clone().unwrap_or_default(),
        client_host: format!("/{}", ctx.conn.peer.ip()),
        subscribed: req
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.to_string()).collect()),
        session_timeout: Some(settings.share_session_timeout),
    };
    let r = broker
        .groups
        .share_heartbeat(&req.group_id, h, &CatalogView(&broker.catalog))
        .await;
    if let Some((e, msg)) = r.error {
        return error_response(e, msg);
    }
    let topics = r.assignment.map(|a| by_topic(broker, a));
    // The share partitions this broker leads start where the group is assigned them.
    for (id, name, ps) in topics.iter().flatten() {
        for p in ps {
            if let Ok((_, part)) = broker.catalog.partition(name, *p) {
                let place = part.placement();
                if place.leader != broker.node_id() {
                    continue;
                }
                let loaded =
                    super::share_fetch::load(broker, &req.group_id, (*id, *p), &part, &settings)
                        .await;
                if let Err(e) = loaded {
                    tracing::debug!(group = %req.group_id.as_str(), topic = %name, partition = p, error = ?e, "share partition not initialized on assignment");
                }
            }
        }
    }
    let assignment = topics.map(|topics| {
        Assignment::default().with_topic_partitions(
            topics
                .into_iter()
                .map(|(id, _, ps)| {
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(ps)
                })
                .collect(),
        )
    });
    ShareGroupHeartbeatResponse::default()
        .with_member_id(Some(str_bytes(r.member_id)))
        .with_member_epoch(r.epoch)
        .with_heartbeat_interval_ms(settings.share_heartbeat_interval.as_millis() as i32)
        .with_assignment(assignment)
}

pub async fn describe(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    // Kafka's check: DESCRIBE on each group.
    let access = ctx.access(broker);
    let assignment = |tps: Vec<Tp>| {
        DescribedAssignment::default().with_topic_partitions(
            by_topic(broker, tps)
                .into_iter()
                .map(|(id, name, ps)| {
                    DescribedTopicPartitions::default()
                        .with_topic_id(id)
                        .with_topic_name(topic_name(&name))
                        .with_partitions(ps)
                })
                .collect(),
        )
    };
    let groups = req
        .group_ids
        .iter()
        .map(|id| {
            let base = DescribedGroup::default().with_group_id(id.clone());
            let base = match group_described(&access, id, req.include_authorized_operations) {
                Ok(ops) => base.with_authorized_operations(ops),
                Err(e) => return base.with_error_code(e.code()),
            };
            if !broker.share_groups_enabled() {
                return base.with_error_code(ResponseError::UnsupportedVersion.code());
            }
            let d = match broker.groups.share_describe(id) {
                Ok(d) => d,
                Err(e) => return base.with_error_code(e.code()),
            };
            let Some(d) = d else {
                return base
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(format!(
                        "Group {} is not a share group.",
                        id.as_str()
                    ))));
            };
            let members = d
                .members
                .into_iter()
                .map(|m| {
                    Member::default()
                        .with_member_id(str_bytes(m.id.clone()))
                        .with_rack_id(m.rack_id.clone().map(str_bytes))
                        .with_member_epoch(m.epoch)
                        .with_client_id(str_bytes(m.client_id.clone()))
                        .with_client_host(str_bytes(m.client_host.clone()))
                        .with_subscribed_topic_names(
                            m.subscribed.iter().map(|t| topic_name(t)).collect(),
                        )
                        .with_assignment(assignment(m.assigned.iter().cloned().collect()))
                })
                .collect();
            base.with_group_state(str_bytes(d.state))
                .with_group_epoch(d.epoch)
                .with_assignment_epoch(d.epoch)
                .with_assignor_name(str_bytes("simple"))
                .with_members(members)
        })
        .collect();
    ShareGroupDescribeResponse::default().with_groups(groups)
}

/// DescribeShareGroupOffsets (kafka-share-groups --describe): each share partition's start
/// offset (-1 for a partition the group has not read yet, or when no share group has the
/// id, as Kafka answers). As Kafka checks: DESCRIBE on the group, and on each topic
/// (named topics the principal may not describe are TOPIC_AUTHORIZATION_FAILED; when all
/// are asked for, they are left out).
pub async fn describe_offsets(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    LaidOutAs(req): ShareGroupOffsets,
) -> ShareGroupOffsetsReply {
    use kafka_protocol::messages::describe_share_group_offsets_response::{
        DescribeShareGroupOffsetsResponseGroup as Group,
        DescribeShareGroupOffsetsResponsePartition as Part,
        DescribeShareGroupOffsetsResponseTopic as Topic,
    };
    let access = ctx.access(broker);
    let mut groups = Vec::with_capacity(req.groups.len());
    let mut lags = HashMap::new();
    for g in &req.groups {
        let base = Group::default().with_group_id(g.group_id.clone());
        let refuse = |e: ResponseError, msg: String| {
            base.clone()
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(msg)))
        };
        if !broker.share_groups_enabled() {
            groups.push(refuse(
                ResponseError::UnsupportedVersion,
                "Share groups are not enabled.".into(),
            ));
            continue;
        }
        if !access.allows(op::DESCRIBE, resource::GROUP, &g.group_id) {
            let e = ResponseError::GroupAuthorizationFailed;
            groups.push(refuse(e, e.to_string()));
            continue;
        }
        let topics_read = match broker.groups.share_describe(&g.group_id) {
            Err(e) => {
                groups.push(refuse(e, e.to_string()));
                continue;
            }
            // No share group by that id (none at all, or a consumer group): no partition
            // started, as Kafka 4.4 answers.
            Ok(None) => Vec::new(),
            Ok(Some(d)) => d.topics,
        };
        // The topics asked for (every partition named, started or not), or every partition
        // the group has started reading of the topics its members subscribed to.
        let (wanted, started_only): (Vec<(String, Vec<i32>)>, bool) = match &g.topics {
            Some(ts) => (
                ts.iter()
                    .map(|t| (t.topic_name.to_string(), t.partitions.clone()))
                    .collect(),
                false,
            ),
            None => {
                let all = topics_read
                    .iter()
                    .filter(|n| access.allows(op::DESCRIBE, resource::TOPIC, n))
                    .filter_map(|n| broker.catalog.get(n))
                    .map(|t| (t.name.clone(), (0..t.partitions.len() as i32).collect()))
                    .collect();
                (all, true)
            }
        };
        let mut topics = Vec::new();
        for (name, parts) in wanted {
            let topic = broker.catalog.get(&name);
            let id = topic.as_ref().map_or(Uuid::nil(), |t| t.id);
            let mut partitions = Vec::new();
            let described = access.allows(op::DESCRIBE, resource::TOPIC, &name);
            for p in parts {
                let base = Part::default()
                    .with_partition_index(p)
                    .with_start_offset(-1)
                    .with_leader_epoch(-1);
                if !described {
                    let e = ResponseError::TopicAuthorizationFailed;
                    partitions.push(
                        base.with_error_code(e.code())
                            .with_error_message(Some(str_bytes(e.to_string()))),
                    );
                    continue;
                }
                if topic.as_ref().and_then(|t| t.partition(p)).is_none() {
                    partitions
                        .push(base.with_error_code(ResponseError::UnknownTopicOrPartition.code()));
                    continue;
                }
                match broker.shares.summary(&g.group_id, (id, p)).await {
                    Err(e) => partitions.push(base.with_error_code(e.code())),
                    Ok(None) if started_only => {}
                    Ok(None) => partitions.push(base),
                    Ok(Some(s)) => {
                        // Unknown (-1) when the leader cannot say now, as in Kafka.
                        let lag = match broker.high_watermark(&name, p).await {
                            Ok(hw) => s.lag(hw),
                            Err(_) => -1,
                        };
                        lags.insert((g.group_id.to_string(), id, p), lag);
                        partitions.push(
                            base.with_start_offset(s.start)
                                .with_leader_epoch(s.leader_epoch),
                        )
                    }
                }
            }
            if !partitions.is_empty() {
                topics.push(
                    Topic::default()
                        .with_topic_name(topic_name(&name))
                        .with_topic_id(id)
                        .with_partitions(partitions),
                );
            }
        }
        groups.push(base.with_topics(topics));
    }
    ShareGroupOffsetsReply {
        response: DescribeShareGroupOffsetsResponse::default().with_groups(groups),
        lags,
    }
}

/// AlterShareGroupOffsets (kafka-share-groups --reset-offsets): starts each named share
/// partition afresh at the given offset, on an empty share group (created empty when no
/// group has the id). Topics or partitions that do not exist get UNKNOWN_TOPIC_OR_PARTITION.
/// As Kafka checks: READ on the group (else GROUP_AUTHORIZATION_FAILED for the whole
/// request) and READ on each topic.
pub async fn alter_offsets(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    use kafka_protocol::messages::alter_share_group_offsets_response::{
        AlterShareGroupOffsetsResponsePartition as Part,
        AlterShareGroupOffsetsResponseTopic as Topic,
    };
    let access = ctx.access(broker);
    let readable = |t: &str| access.allows(op::READ, resource::TOPIC, t);
    let names: Vec<String> = req
        .topics
        .iter()
        .map(|t| t.topic_name.to_string())
        .filter(|t| readable(t))
        .collect();
    let checked = check_offsets_changeable(broker, &access, op::READ, &req.group_id, &names);
    if let Err((e, msg)) = checked.await {
        return AlterShareGroupOffsetsResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(msg)));
    }
    let mut responses = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let topic = broker.catalog.get(t.topic_name.as_str());
        let id = topic.as_ref().map_or(Uuid::nil(), |t| t.id);
        let mut starts = Vec::new();
        let mut partitions = Vec::new();
        let read = readable(&t.topic_name);
        for p in &t.partitions {
            let base = Part::default().with_partition_index(p.partition_index);
            if !read {
                let e = ResponseError::TopicAuthorizationFailed;
                partitions.push(
                    base.with_error_code(e.code())
                        .with_error_message(Some(str_bytes(e.to_string()))),
                );
                continue;
            }
            match topic.as_ref().and_then(|t| t.partition(p.partition_index)) {
                None => partitions.push(
                    base.with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str_bytes(
                            "This server does not host this topic-partition.",
                        ))),
                ),
                Some(_) => starts.push(((id, p.partition_index), p.start_offset.max(0))),
            }
        }
        let results = broker.shares.start_afresh(&req.group_id, &starts).await;
        for (((_, index), _), r) in starts.iter().zip(results) {
            let base = Part::default().with_partition_index(*index);
            partitions.push(match r {
                Ok(()) => base,
                Err(e) => base.with_error_code(e.code()),
            });
        }
        partitions.sort_by_key(|p| p.partition_index);
        responses.push(
            Topic::default()
                .with_topic_name(t.topic_name.clone())
                .with_topic_id(id)
                .with_partitions(partitions),
        );
    }
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}

/// DeleteShareGroupOffsets (kafka-share-groups --delete-offsets): forgets where an empty
/// share group is in each named topic; it starts again where `share.auto.offset.reset`
/// says when next assigned the topic. As Kafka checks: DELETE on the group (else
/// GROUP_AUTHORIZATION_FAILED for the whole request) and READ on each topic.
pub async fn delete_offsets(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as Topic;
    let access = ctx.access(broker);
    let checked = check_offsets_changeable(broker, &access, op::DELETE, &req.group_id, &[]);
    if let Err((e, msg)) = checked.await {
        return DeleteShareGroupOffsetsResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(msg)));
    }
    let mut responses = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let base = Topic::default().with_topic_name(t.topic_name.clone());
        if !access.allows(op::READ, resource::TOPIC, &t.topic_name) {
            let e = ResponseError::TopicAuthorizationFailed;
            responses.push(
                base.with_error_code(e.code())
                    .with_error_message(Some(str_bytes(e.to_string()))),
            );
            continue;
        }
        let Some(topic) = broker.catalog.get(t.topic_name.as_str()) else {
            responses.push(
                base.with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_error_message(Some(str_bytes(
                        "This server does not host this topic-partition.",
                    ))),
            );
            continue;
        };
        let starts: Vec<_> = (0..topic.partitions.len() as i32)
            .map(|p| ((topic.id, p), -1))
            .collect();
        let results = broker.shares.start_afresh(&req.group_id, &starts).await;
        let base = base.with_topic_id(topic.id);
        responses.push(match results.into_iter().find_map(|r| r.err()) {
            None => base,
            Some(e) => base.with_error_code(e.code()),
        });
    }
    DeleteShareGroupOffsetsResponse::default().with_responses(responses)
}

/// The group-level checks of Alter/DeleteShareGroupOffsets: share groups on, `operation`
/// on the group allowed, a group id, an empty share group here (see
/// [`crate::coordinator::Coordinator::share_offsets_changeable`]).
async fn check_offsets_changeable(
    broker: &Broker,
    access: &Access,
    operation: i8,
    group: &str,
    topics: &[String],
) -> Result<(), (ResponseError, String)> {
    if !broker.share_groups_enabled() {
        return Err((
            ResponseError::UnsupportedVersion,
            "Share groups are not enabled.".into(),
        ));
    }
    if !access.allows(operation, resource::GROUP, group) {
        let e = ResponseError::GroupAuthorizationFailed;
        return Err((e, e.to_string()));
    }
    if group.is_empty() {
        return Err((
            ResponseError::InvalidGroupId,
            "The group id is empty.".into(),
        ));
    }
    broker.groups.share_offsets_changeable(group, topics).await
}
