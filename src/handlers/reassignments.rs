//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455, what
//! kafka-reassign-partitions drives). The controller decides each partition's change (see
//! `Image::reassign`); the list is read from this broker's metadata image. A single node
//! has nothing to move: its own id is the only assignment, already in place.

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
use kafka_protocol::ResponseError;

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
    let mut responses = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let topic = t.name.as_str();
        let mut out = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let target: Option<Vec<i32>> =
                p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
            let outcome = match broker.cluster() {
                Some(c) => c
                    .reassign(topic, p.partition_index, target, allow_rf_change)
                    .await
                    .map_err(|e| (e.response_error(), e.to_string())),
                None => single_node(broker, topic, p.partition_index, target.as_deref()),
            };
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

fn single_node(
    broker: &Broker,
    topic: &str,
    index: i32,
    target: Option<&[i32]>,
) -> Result<(), (ResponseError, String)> {
    if let Err(e) = broker.catalog.partition(topic, index) {
        return Err((e.response_error(), e.to_string()));
    }
    let me = broker.node_id();
    match target {
        None => Err((
            ResponseError::NoReassignmentInProgress,
            format!("no reassignment of {topic}-{index} is in progress"),
        )),
        Some([b]) if *b == me => Ok(()),
        Some(t) => match t.iter().find(|b| **b != me) {
            Some(b) => Err((
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "the reassignment of {topic}-{index} names broker {b}, which is not registered"
                ),
            )),
            None => Err((
                ResponseError::InvalidReplicaAssignment,
                format!("the reassignment of {topic}-{index} must name broker {me} exactly once"),
            )),
        },
    }
}

pub async fn list(
    broker: &Arc<Broker>,
    _ctx: &RequestContext<'_>,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let Some(c) = broker.cluster() else {
        return ListPartitionReassignmentsResponse::default();
    };
    let image = c.image();
    // Null asks for every ongoing reassignment; named partitions without one (or unknown)
    // are left out, as Kafka does.
    let wanted: Vec<(String, Option<Vec<i32>>)> = match &req.topics {
        Some(ts) => ts
            .iter()
            .map(|t| (t.name.to_string(), Some(t.partition_indexes.clone())))
            .collect(),
        None => image.names.keys().map(|n| (n.clone(), None)).collect(),
    };
    let mut topics = Vec::new();
    for (name, indexes) in wanted {
        let Some(t) = image.names.get(&name).and_then(|id| image.topics.get(id)) else {
            continue;
        };
        let ongoing: Vec<OngoingPartitionReassignment> = t
            .partitions
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                p.reassigning() && indexes.as_ref().is_none_or(|ix| ix.contains(&(*i as i32)))
            })
            .map(|(i, p)| {
                OngoingPartitionReassignment::default()
                    .with_partition_index(i as i32)
                    .with_replicas(p.replicas.iter().map(|b| broker_id(*b)).collect())
                    .with_adding_replicas(p.adding.iter().map(|b| broker_id(*b)).collect())
                    .with_removing_replicas(p.removing.iter().map(|b| broker_id(*b)).collect())
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
