//! The KIP-848 consumer group protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe
//! (the Java client's `group.protocol=consumer`). Partitions go over the wire by topic id;
//! the coordinator works with names.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member,
    TopicPartitions as DescribedTopicPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::RequestContext;
use super::{group_described, str_bytes, topic_name};
use crate::broker::Broker;
use crate::coordinator::consumer::{Heartbeat, TopicView, Tp};
use crate::security::acl::{op, resource};
use crate::topics::Catalog;

/// Partitions by topic name -> by topic id (topics that vanished are left out).
pub(super) fn by_topic(
    broker: &Broker,
    tps: impl IntoIterator<Item = Tp>,
) -> Vec<(Uuid, String, Vec<i32>)> {
    let mut grouped: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (t, p) in tps {
        grouped.entry(t).or_default().push(p);
    }
    grouped
        .into_iter()
        .filter_map(|(t, ps)| broker.catalog.get(&t).map(|topic| (topic.id, t, ps)))
        .collect()
}

fn error_response(e: ResponseError, msg: impl Into<String>) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(e.code())
        .with_error_message(Some(str_bytes(msg.into())))
}

/// The broker's topics as a consumer group sees them.
struct CatalogView<'a>(&'a Catalog);

impl TopicView for CatalogView<'_> {
    fn partitions(&self, topic: &str) -> Option<i32> {
        self.0.get(topic).map(|t| t.partitions.len() as i32)
    }
    fn names(&self) -> Vec<String> {
        self.0.names()
    }
    fn version(&self) -> u64 {
        self.0.version()
    }
}

pub async fn heartbeat(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    if req.group_id.is_empty() {
        return error_response(ResponseError::InvalidRequest, "GroupId can't be empty.");
    }
    // Kafka's checks: READ on the group, DESCRIBE on each topic subscribed to by name.
    let access = ctx.access(broker);
    if !access.allows(op::READ, resource::GROUP, &req.group_id) {
        let e = ResponseError::GroupAuthorizationFailed;
        return error_response(e, e.to_string());
    }
    let hidden: Vec<&str> = req
        .subscribed_topic_names
        .iter()
        .flatten()
        .filter(|t| !access.allows(op::DESCRIBE, resource::TOPIC, t))
        .map(|t| t.as_str())
        .collect();
    if !hidden.is_empty() {
        return error_response(
            ResponseError::TopicAuthorizationFailed,
            format!("Topics not authorized: {}", hidden.join(", ")),
        );
    }
    let owned = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .filter_map(|t| broker.catalog.get_by_id(t.topic_id).map(|topic| (topic, t)))
            .flat_map(|(topic, t)| t.partitions.iter().map(move |p| (topic.name.clone(), *p)))
            .collect()
    });
    let settings = broker.group_settings(&req.group_id);
    let h = Heartbeat {
        member_id: req.member_id.to_string(),
        epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        client_id: ctx.client_id.clone().unwrap_or_default(),
        client_host: format!("/{}", ctx.conn.peer.ip()),
        rebalance_timeout: Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64),
        subscribed: req
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.to_string()).collect()),
        regex: req.subscribed_topic_regex.as_ref().map(|s| s.to_string()),
        assignor: req.server_assignor.as_ref().map(|s| s.to_string()),
        owned,
        // KIP-1082: from v1 the client makes up its member id, even to join.
        member_id_required: ctx.version >= 1,
        session_timeout: Some(settings.consumer_session_timeout),
    };
    let r = broker
        .groups
        .consumer_heartbeat(&req.group_id, h, &CatalogView(&broker.catalog))
        .await;
    if let Some((e, msg)) = r.error {
        return error_response(e, msg);
    }
    let assignment = r.assignment.map(|a| {
        Assignment::default().with_topic_partitions(
            by_topic(broker, a)
                .into_iter()
                .map(|(id, _, ps)| {
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(ps)
                })
                .collect(),
        )
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_member_id(Some(str_bytes(r.member_id)))
        .with_member_epoch(r.epoch)
        .with_heartbeat_interval_ms(settings.consumer_heartbeat_interval.as_millis() as i32)
        .with_assignment(assignment)
}

pub async fn describe(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
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
    // Kafka's check: DESCRIBE on each group.
    let access = ctx.access(broker);
    let groups = req
        .group_ids
        .iter()
        .map(|id| {
            let base = DescribedGroup::default().with_group_id(id.clone());
            let base = match group_described(&access, id, req.include_authorized_operations) {
                Ok(ops) => base.with_authorized_operations(ops),
                Err(e) => return base.with_error_code(e.code()),
            };
            let d = match broker.groups.consumer_describe(id) {
                Ok(d) => d,
                Err(e) => return base.with_error_code(e.code()),
            };
            let Some(d) = d else {
                return base
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(format!(
                        "Group {} is not a consumer group.",
                        id.as_str()
                    ))));
            };
            let members = d
                .members
                .into_iter()
                .map(|(m, target)| {
                    let member = Member::default()
                        .with_member_id(str_bytes(m.id.clone()))
                        .with_instance_id(m.instance_id.clone().map(str_bytes))
                        .with_rack_id(m.rack_id.clone().map(str_bytes))
                        .with_member_epoch(m.epoch)
                        .with_client_id(str_bytes(m.client_id.clone()))
                        .with_client_host(str_bytes(m.client_host.clone()))
                        .with_subscribed_topic_names(
                            m.subscribed.iter().map(|t| topic_name(t)).collect(),
                        )
                        .with_subscribed_topic_regex(m.regex.clone().map(str_bytes))
                        .with_assignment(assignment(m.assigned.iter().cloned().collect()))
                        .with_target_assignment(assignment(target));
                    if ctx.version >= 1 {
                        member.with_member_type(1) // a consumer-protocol member
                    } else {
                        member
                    }
                })
                .collect();
            base.with_group_state(str_bytes(d.state))
                .with_group_epoch(d.epoch)
                .with_assignment_epoch(d.assignment_epoch)
                .with_assignor_name(str_bytes(d.assignor))
                .with_members(members)
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
