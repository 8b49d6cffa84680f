//! DescribeQuorum (kafka-metadata-quorum): the Raft quorum over `controller.quorum.voters`
//! as the active controller sees it, asked through the controller listener from any
//! broker, reported as KRaft's `__cluster_metadata` partition 0. A single node is a quorum
//! of one voter.

use std::sync::Arc;

use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{DescribeQuorumRequest, DescribeQuorumResponse};
use kafka_protocol::ResponseError;

use super::RequestContext;
use super::{broker_id, str_bytes, topic_name};
use crate::broker::Broker;

const METADATA_TOPIC: &str = "__cluster_metadata";

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    let asked_right = req.topics.len() == 1
        && req.topics[0].topic_name.as_str() == METADATA_TOPIC
        && req.topics[0].partitions.len() == 1
        && req.topics[0].partitions[0].partition_index == 0;
    let partition = PartitionData::default().with_partition_index(0);
    let failed = |e: ResponseError, msg: String| {
        let p = partition.clone().with_error_code(e.code());
        let p = if ctx.version >= 2 {
            p.with_error_message(Some(str_bytes(msg)))
        } else {
            p
        };
        DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
            .with_topic_name(topic_name(METADATA_TOPIC))
            .with_partitions(vec![p])])
    };
    // Kafka's check: DESCRIBE on the cluster.
    if !ctx.may_on_cluster(broker, crate::security::acl::op::DESCRIBE) {
        let e = ResponseError::ClusterAuthorizationFailed;
        let r = DescribeQuorumResponse::default().with_error_code(e.code());
        return match ctx.version >= 2 {
            true => r.with_error_message(Some(str_bytes(e.to_string()))),
            false => r,
        };
    }
    if !asked_right {
        return failed(
            ResponseError::UnknownTopicOrPartition,
            format!("the metadata quorum is {METADATA_TOPIC}-0"),
        );
    }
    let q = match broker.describe_quorum().await {
        Ok(q) => q,
        Err((error, message)) => return failed(error, message),
    };
    let voters = q
        .voters
        .iter()
        .map(|(id, leo)| {
            ReplicaState::default()
                .with_replica_id(broker_id(*id))
                .with_log_end_offset(*leo)
                .with_last_fetch_timestamp(-1)
                .with_last_caught_up_timestamp(-1)
        })
        .collect();
    let mut resp = DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
        .with_topic_name(topic_name(METADATA_TOPIC))
        .with_partitions(vec![partition
            .with_leader_id(broker_id(q.leader))
            .with_leader_epoch(q.epoch)
            .with_high_watermark(q.high_watermark)
            .with_current_voters(voters)])]);
    if ctx.version >= 2 {
        let listener = broker
            .config
            .cluster
            .controller_listener_names
            .first()
            .cloned()
            .unwrap_or_else(|| "CONTROLLER".into());
        resp.nodes = broker
            .config
            .cluster
            .voters
            .iter()
            .map(|v| {
                Node::default()
                    .with_node_id(broker_id(v.id))
                    .with_listeners(vec![Listener::default()
                        .with_name(str_bytes(listener.clone()))
                        .with_host(str_bytes(v.host.clone()))
                        .with_port(v.port)])
            })
            .collect();
    }
    resp
}
