//! OffsetForLeaderEpoch: the end offset of a leader epoch, from the leader epoch cache. Used
//! by consumers to validate their position after a leader change, and by followers to find
//! where their log diverges from the leader's.

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::RequestContext;
use crate::broker::Broker;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    use crate::security::acl::{op, resource};
    // Kafka's checks: a follower needs CLUSTER_ACTION, a consumer DESCRIBE on each topic.
    let access = ctx.access(broker);
    let follower = req.replica_id.0 >= 0;
    let follower_allowed = follower && access.allows_cluster(op::CLUSTER_ACTION);
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let allowed = match follower {
                true => follower_allowed,
                false => access.allows(op::DESCRIBE, resource::TOPIC, &t.topic),
            };
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let r = EpochEndOffset::default().with_partition(p.partition);
                    let led = match allowed {
                        true => broker.led_partition(&t.topic, p.partition),
                        false => Err(crate::broker::authorizer::denied(resource::TOPIC)),
                    };
                    let found = led.and_then(|(_, part)| {
                        part.log
                            .check_leader_epoch(p.current_leader_epoch)
                            .map(|_| part)
                    });
                    match found {
                        Ok(part) => {
                            let (epoch, end) = part.log.end_offset_for_epoch(p.leader_epoch);
                            r.with_leader_epoch(epoch).with_end_offset(end)
                        }
                        Err(e) => r
                            .with_error_code(e.code())
                            .with_leader_epoch(-1)
                            .with_end_offset(-1),
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
