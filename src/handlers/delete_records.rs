//! DeleteRecords: move partitions' log start offsets forward on demand.

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::RequestContext;
use crate::broker::authorizer::denied;
use crate::broker::Broker;
use crate::security::acl::{op, resource};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    // Kafka's check: DELETE on each topic.
    let access = ctx.access(broker);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let allowed = access.allows(op::DELETE, resource::TOPIC, &t.name);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let found = match allowed {
                true => broker.led_partition(&t.name, p.partition_index),
                false => Err(denied(resource::TOPIC)),
            };
            let result = match found {
                Ok((_, part)) => part.log.delete_records(p.offset).await,
                Err(e) => Err(e),
            };
            let r = DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            partitions.push(match result {
                Ok(low) => r.with_low_watermark(low),
                Err(e) => r.with_low_watermark(-1).with_error_code(e.code()),
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}
