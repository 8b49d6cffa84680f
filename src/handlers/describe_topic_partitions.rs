//! DescribeTopicPartitions (KIP-966): what `kafka-topics --describe` asks first, with
//! paging by a cursor and a partition limit per response.

use std::sync::Arc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse};

use super::RequestContext;
use super::{broker_id, topic_name, TOPIC_OPERATIONS_ALL};
use crate::broker::Broker;
use crate::error::Error;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    use crate::security::acl::{op, resource};
    // Kafka's check: DESCRIBE on each topic; unnamed ones the principal may not describe
    // are left out, named ones refused.
    let access = ctx.access(broker);
    let mut names: Vec<String> = if req.topics.is_empty() {
        broker
            .catalog
            .all()
            .iter()
            .filter(|t| access.allows(op::DESCRIBE, resource::TOPIC, &t.name))
            .map(|t| t.name.clone())
            .collect()
    } else {
        req.topics.iter().map(|t| t.name.to_string()).collect()
    };
    names.sort();
    names.dedup();
    let (cursor_topic, cursor_partition) = match &req.cursor {
        Some(c) => (Some(c.topic_name.to_string()), c.partition_index.max(0)),
        None => (None, 0),
    };
    let mut budget = if req.response_partition_limit > 0 {
        req.response_partition_limit
    } else {
        2000
    };
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for name in names {
        let first = match &cursor_topic {
            Some(c) if name < *c => continue,
            Some(c) if name == *c => cursor_partition,
            _ => 0,
        };
        if !access.allows(op::DESCRIBE, resource::TOPIC, &name) {
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(crate::broker::authorizer::denied(resource::TOPIC).code())
                    .with_name(Some(topic_name(&name))),
            );
            continue;
        }
        let Some(t) = broker.catalog.get(&name) else {
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(Error::UnknownTopicOrPartition.code())
                    .with_name(Some(topic_name(&name))),
            );
            continue;
        };
        if budget == 0 {
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(&name))
                    .with_partition_index(first),
            );
            break;
        }
        let mut partitions = Vec::new();
        for p in t.partitions.iter().skip(first as usize) {
            if budget == 0 {
                next_cursor = Some(
                    Cursor::default()
                        .with_topic_name(topic_name(&name))
                        .with_partition_index(p.index),
                );
                break;
            }
            budget -= 1;
            let place = p.placement();
            partitions.push(
                DescribeTopicPartitionsResponsePartition::default()
                    .with_partition_index(p.index)
                    .with_leader_id(broker_id(place.leader))
                    .with_error_code(if place.leader < 0 {
                        kafka_protocol::ResponseError::LeaderNotAvailable.code()
                    } else {
                        0
                    })
                    .with_leader_epoch(place.leader_epoch)
                    .with_replica_nodes(place.replicas.into_iter().map(broker_id).collect())
                    .with_isr_nodes(place.isr.into_iter().map(broker_id).collect())
                    .with_offline_replicas(place.offline.into_iter().map(broker_id).collect())
                    .with_eligible_leader_replicas(Some(vec![]))
                    .with_last_known_elr(Some(vec![])),
            );
        }
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(&t.name)))
                .with_topic_id(t.id)
                .with_is_internal(t.is_internal())
                .with_partitions(partitions)
                .with_topic_authorized_operations(access.operations(
                    resource::TOPIC,
                    &t.name,
                    TOPIC_OPERATIONS_ALL,
                )),
        );
        if next_cursor.is_some() {
            break;
        }
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}
