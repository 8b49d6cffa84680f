//! The share coordinator's RPCs (KIP-932), which partition leaders send to the broker that
//! keeps their share partitions' state: InitializeShareGroupState, ReadShareGroupState,
//! WriteShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary. Each names
//! partitions by group, topic id and partition; each partition is answered on its own,
//! NOT_COORDINATOR when another broker keeps it. Only brokers call them: as in Kafka, a
//! principal without CLUSTER_ACTION on the cluster gets CLUSTER_AUTHORIZATION_FAILED for
//! every partition.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::RequestContext;
use crate::broker::Broker;
use crate::coordinator::share_state::{key, StateWrite};
use crate::security::acl::op;
use crate::share;
use crate::wire::newer::{LaidOutAs, ShareStateSummary, ShareStateSummaryReply};

fn code(r: &Result<(), ResponseError>) -> i16 {
    r.as_ref().err().map_or(0, |e| e.code())
}

/// Ok when the principal may act as a broker (CLUSTER_ACTION), else the error every
/// partition is answered with.
fn as_broker(broker: &Broker, ctx: &RequestContext<'_>) -> Result<(), ResponseError> {
    match ctx.may_on_cluster(broker, op::CLUSTER_ACTION) {
        true => Ok(()),
        false => Err(ResponseError::ClusterAuthorizationFailed),
    }
}

pub async fn initialize(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: InitializeShareGroupStateRequest,
) -> InitializeShareGroupStateResponse {
    use initialize_share_group_state_response::{InitializeStateResult, PartitionResult};
    let allowed = as_broker(broker, ctx);
    let mut results = Vec::new();
    for t in &req.topics {
        let mut partitions = Vec::new();
        for p in &t.partitions {
            let k = key(&req.group_id, t.topic_id, p.partition);
            let r = async {
                allowed?;
                let states = &broker.share_states;
                states.initialize(&k, p.state_epoch, p.start_offset).await
            };
            let r = r.await;
            partitions.push(
                PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(code(&r)),
            );
        }
        results.push(
            InitializeStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    InitializeShareGroupStateResponse::default().with_results(results)
}

pub async fn read(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ReadShareGroupStateRequest,
) -> ReadShareGroupStateResponse {
    use read_share_group_state_response::{PartitionResult, ReadStateResult, StateBatch};
    let allowed = as_broker(broker, ctx);
    let mut results = Vec::new();
    for t in &req.topics {
        let mut partitions = Vec::new();
        for p in &t.partitions {
            let k = key(&req.group_id, t.topic_id, p.partition);
            let base = PartitionResult::default().with_partition(p.partition);
            let read = async {
                allowed?;
                broker.share_states.read_as_leader(&k, p.leader_epoch).await
            };
            let read = read.await;
            partitions.push(match read {
                Err(e) => base.with_error_code(e.code()),
                // Never initialized: start -1, the leader picks its start.
                Ok(None) => base.with_start_offset(-1),
                Ok(Some(s)) => base
                    .with_state_epoch(s.state_epoch)
                    .with_start_offset(s.start)
                    .with_state_batches(
                        s.runs
                            .iter()
                            .map(|&(first, last, state, count)| {
                                StateBatch::default()
                                    .with_first_offset(first)
                                    .with_last_offset(last)
                                    .with_delivery_state(state)
                                    .with_delivery_count(count)
                            })
                            .collect(),
                    ),
            });
        }
        results.push(
            ReadStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    ReadShareGroupStateResponse::default().with_results(results)
}

pub async fn write(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: WriteShareGroupStateRequest,
) -> WriteShareGroupStateResponse {
    use write_share_group_state_response::{PartitionResult, WriteStateResult};
    let allowed = as_broker(broker, ctx);
    let mut results = Vec::new();
    for t in &req.topics {
        let mut partitions = Vec::new();
        for p in &t.partitions {
            let k = key(&req.group_id, t.topic_id, p.partition);
            let w = StateWrite {
                state_epoch: p.state_epoch,
                leader_epoch: p.leader_epoch,
                start: p.start_offset,
                runs: p
                    .state_batches
                    .iter()
                    .map(|b| {
                        (
                            b.first_offset,
                            b.last_offset,
                            b.delivery_state,
                            b.delivery_count,
                        )
                    })
                    .collect(),
            };
            let r = async {
                allowed?;
                broker.share_states.write(&k, w).await
            };
            let r = r.await;
            partitions.push(
                PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(code(&r)),
            );
        }
        results.push(
            WriteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    WriteShareGroupStateResponse::default().with_results(results)
}

pub async fn delete(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DeleteShareGroupStateRequest,
) -> DeleteShareGroupStateResponse {
    use delete_share_group_state_response::{DeleteStateResult, PartitionResult};
    let allowed = as_broker(broker, ctx);
    let mut results = Vec::new();
    for t in &req.topics {
        let mut partitions = Vec::new();
        for p in &t.partitions {
            let k = key(&req.group_id, t.topic_id, p.partition);
            let r = async {
                allowed?;
                broker.share_states.delete(&k).await
            };
            let r = r.await;
            partitions.push(
                PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(code(&r)),
            );
        }
        results.push(
            DeleteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    DeleteShareGroupStateResponse::default().with_results(results)
}

/// The start offset, epochs and (v1, KIP-1226) delivery-complete count of each share
/// partition: what DescribeShareGroupOffsets shows, with the lag.
pub async fn summary(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    LaidOutAs(req): ShareStateSummary,
) -> ShareStateSummaryReply {
    use read_share_group_state_summary_response::{PartitionResult, ReadStateSummaryResult};
    let allowed = as_broker(broker, ctx);
    let mut delivery_complete = HashMap::new();
    let mut results = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let k = key(&req.group_id, t.topic_id, p.partition);
            let base = PartitionResult::default().with_partition(p.partition);
            let read = allowed.and_then(|()| broker.share_states.read(&k));
            partitions.push(match read {
                Err(e) => base.with_error_code(e.code()),
                Ok(None) => base.with_start_offset(-1).with_leader_epoch(-1),
                Ok(Some(s)) => {
                    let done = share::partition::delivery_complete(s.start, &s.runs);
                    delivery_complete.insert((t.topic_id, p.partition), done);
                    base.with_state_epoch(s.state_epoch)
                        .with_leader_epoch(s.leader_epoch)
                        .with_start_offset(s.start)
                }
            });
        }
        results.push(
            ReadStateSummaryResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    ShareStateSummaryReply {
        response: ReadShareGroupStateSummaryResponse::default().with_results(results),
        delivery_complete,
    }
}
