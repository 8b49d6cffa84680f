//! ElectLeaders (kafka-leader-election): preferred-leader elections, decided by the
//! controller like Kafka's: the first replica leads again if it is in the ISR and live
//! (ELECTION_NOT_NEEDED when it already leads, PREFERRED_LEADER_NOT_AVAILABLE otherwise).
//! Unclean elections give a partition without a leader its first live replica, in the ISR
//! or not (whatever `unclean.leader.election.enable` says, as in Kafka); partitions with a
//! leader do not need one.

use std::sync::Arc;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use kafka_protocol::ResponseError;

use super::RequestContext;
use super::{str_bytes, topic_name};
use crate::broker::Broker;

const PREFERRED: i8 = 0;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ElectLeadersRequest,
) -> ElectLeadersResponse {
    // Kafka's check: ALTER on the cluster, else every partition is refused.
    let allowed = ctx.may_on_cluster(broker, crate::security::acl::op::ALTER);
    // Null asks for every partition of every topic.
    let wanted: Vec<(String, Vec<i32>)> = match &req.topic_partitions {
        Some(tps) => tps
            .iter()
            .map(|t| (t.topic.to_string(), t.partitions.clone()))
            .collect(),
        None => broker
            .catalog
            .all()
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.partitions.iter().map(|p| p.index).collect(),
                )
            })
            .collect(),
    };
    let mut results = Vec::with_capacity(wanted.len());
    for (topic, partitions) in wanted {
        let mut out = Vec::with_capacity(partitions.len());
        for index in partitions {
            let outcome: Result<(), (ResponseError, String)> =
                match broker.catalog.partition(&topic, index) {
                    _ if !allowed => Err((
                        ResponseError::ClusterAuthorizationFailed,
                        "not authorized to elect leaders".into(),
                    )),
                    Err(e) => Err((e.response_error(), e.to_string())),
                    Ok((_, p)) => broker
                        .elect_leader(
                            &topic,
                            index,
                            &p.placement(),
                            req.election_type != PREFERRED,
                        )
                        .await
                        .map_err(|e| (e.response_error(), e.to_string())),
                };
            let r = PartitionResult::default().with_partition_id(index);
            out.push(match outcome {
                Ok(()) => r,
                Err((e, msg)) => r
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(msg))),
            });
        }
        results.push(
            ReplicaElectionResult::default()
                .with_topic(topic_name(&topic))
                .with_partition_result(out),
        );
    }
    let r = ElectLeadersResponse::default().with_replica_election_results(results);
    match (allowed, ctx.version >= 1) {
        (false, true) => r.with_error_code(ResponseError::ClusterAuthorizationFailed.code()),
        _ => r,
    }
}
