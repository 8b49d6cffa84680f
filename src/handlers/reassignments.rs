//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455, what
//! kafka-reassign-partitions drives). The controller decides each partition's change (see
//! `Image::reassign`); the list is read from this broker's metadata image. On a single node
//! the only possible assignment is the one in place.

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use super::RequestContext;
use super::{broker_id, str_bytes, topic_name};
use crate::broker::Broker;

pub async fn alter(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    // v0 has no such field: the replication factor may change.
    let allow_rf_change = ctx.version < 1 || req.allow_replication_factor_change;
    // Kafka's check: ALTER on the cluster.
    if !ctx.may_on_cluster(broker, crate::security::acl::op::ALTER) {
        let e = kafka_protocol::ResponseError::ClusterAuthorizationFailed;
        return AlterPartitionReassignmentsResponse::default()
            .with_allow_replication_factor_change(allow_rf_change)
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(e.to_string())));
    }
    let mut responses = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let topic = t.name.as_str();
        let mut out = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let target: Option<Vec<i32>> =
                p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
            let outcome = broker
                .reassign(topic, p.partition_index, target, allow_rf_change)
                .await
                .map_err(|e| (e.response_error(), e.to_string()));
            let r =
                ReassignablePartitionResponse::default().with_partition_index(p.partition_index);
            out.push(match outcome {
                Ok(()) => r,
                Err((e, m)) => r
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(m))),
            });
        }
        responses.push(
            ReassignableTopicResponse::default()
                .with_name(topic_name(topic))
                .with_partitions(out),
        );
    }
    AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_rf_change)
        .with_responses(responses)
}

pub async fn list(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    // Kafka's check: DESCRIBE on the cluster.
    if !ctx.may_on_cluster(broker, crate::security::acl::op::DESCRIBE) {
        let e = kafka_protocol::ResponseError::ClusterAuthorizationFailed;
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(e.to_string())));
    }
    // Null asks for every ongoing reassignment; named partitions without one (or unknown)
    // are left out, as Kafka does.
    let wanted: Vec<(String, Option<Vec<i32>>)> = match &req.topics {
        Some(ts) => ts
            .iter()
            .map(|t| (t.name.to_string(), Some(t.partition_indexes.clone())))
            .collect(),
        None => broker
            .image_topic_names()
            .into_iter()
            .map(|n| (n, None))
            .collect(),
    };
    let mut topics = Vec::new();
    for (name, indexes) in wanted {
        let ongoing: Vec<OngoingPartitionReassignment> = broker
            .reassignments(&name, indexes.as_deref())
            .into_iter()
            .map(|r| {
                OngoingPartitionReassignment::default()
                    .with_partition_index(r.index)
                    .with_replicas(r.replicas.into_iter().map(broker_id).collect())
                    .with_adding_replicas(r.adding.into_iter().map(broker_id).collect())
                    .with_removing_replicas(r.removing.into_iter().map(broker_id).collect())
            })
            .collect();
        if !ongoing.is_empty() {
            topics.push(
                OngoingTopicReassignment::default()
                    .with_name(topic_name(&name))
                    .with_partitions(ongoing),
            );
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
