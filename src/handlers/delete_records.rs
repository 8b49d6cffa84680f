//! DeleteRecords: move partitions' log start offsets forward on demand.

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::RequestContext;
use crate::broker::Broker;

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext<'_>,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let result = match broker.led_partition(&t.name, p.partition_index) {
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
