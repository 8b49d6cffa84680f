//! ListOffsets: earliest, latest, by timestamp and max timestamp, with the leader epoch of
//! the answered offset.

use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::RequestContext;
use crate::broker::authorizer::denied;
use crate::broker::Broker;
use crate::error::Result;
use crate::log::ReadUpTo;
use crate::security::acl::{op, resource};
use crate::topics::Partition;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    // Fields a version lacks must stay at their defaults, or the response cannot be encoded.
    let epochs = ctx.version >= 4;
    // KIP-98: read_committed answers stop at the last stable offset, not the HW.
    let upto = match req.isolation_level {
        1 => ReadUpTo::LastStable,
        _ => ReadUpTo::HighWatermark,
    };
    // Consumers (replica id -1), not followers or debugging tools.
    let client = req.replica_id == -1;
    // Kafka's check: DESCRIBE on each topic.
    let access = ctx.access(broker);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let allowed = access.allows(op::DESCRIBE, resource::TOPIC, &t.name);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let r = ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            let found = match allowed {
                true => broker.led_partition(&t.name, p.partition_index),
                false => Err(denied(resource::TOPIC)),
            };
            let result = match found {
                Ok((_, part)) => {
                    lookup(&part, p.current_leader_epoch, p.timestamp, upto, client).await
                }
                Err(e) => Err(e),
            };
            partitions.push(match result {
                Ok((offset, timestamp, epoch)) => r
                    .with_offset(offset)
                    .with_timestamp(timestamp)
                    .with_leader_epoch(if epochs { epoch } else { -1 }),
                Err(e) => r
                    .with_error_code(e.code())
                    .with_offset(-1)
                    .with_timestamp(-1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

/// (offset, timestamp, leader epoch) for one partition; -1s when nothing matches.
///
/// Right after an election the new leader's HW can be below offsets the old leader had
/// already exposed; a "latest" (or later-than-fetchable) answer then would send a consumer
/// backwards, so clients get OFFSET_NOT_AVAILABLE and retry, as Kafka's
/// `Partition.fetchOffsetForTimestamp` answers.
async fn lookup(
    part: &Partition,
    current_leader_epoch: i32,
    timestamp: i64,
    upto: ReadUpTo,
    client: bool,
) -> Result<(i64, i64, i32)> {
    let log = &part.log;
    log.check_leader_epoch(current_leader_epoch)?;
    let o = log.offsets();
    let lagging = || match client {
        true => log.check_hw_caught_up(),
        false => Ok(()),
    };
    let fetchable = match upto {
        ReadUpTo::LastStable => o.last_stable,
        _ => o.high_watermark,
    };
    let found = match timestamp {
        LATEST => {
            lagging()?;
            Some((fetchable, -1))
        }
        EARLIEST | EARLIEST_LOCAL => Some((o.log_start, -1)),
        MAX_TIMESTAMP => log.max_timestamp(upto).await?,
        t if t >= 0 => log.offset_for_timestamp(t, upto).await?,
        // Tiered-storage lookups (-5 and below): nothing is tiered.
        _ => None,
    };
    if timestamp != LATEST && found.is_some_and(|(offset, _)| offset >= fetchable) {
        lagging()?;
    }
    Ok(match found {
        Some((offset, ts)) => (offset, ts, log.epoch_at(offset)),
        None => (-1, -1, -1),
    })
}
