//! Share partitions' state on its way to the share coordinator (Kafka's
//! `DefaultStatePersister`): the leader of a topic partition reads and writes the state of
//! each share group's share partition through the coordinator of its key
//! (`group:topic-id:partition`), the leader of that key's `__share_group_state`
//! partition: on this broker, directly; on another, with ReadShareGroupState,
//! WriteShareGroupState and DeleteShareGroupState on the inter-broker listener. While the
//! coordinator moves or loads, calls are retried for a while, as Kafka's persister does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::ResponseError;

use super::{peer, Cluster, CoordinatorKind};
use crate::coordinator::share_state::{key, ShareState, StateWrite};
use crate::dial::Dialer;
use crate::share::partition::{delivery_complete, Snapshot};
use crate::share::{Persister, Summary, TopicIdPartition};
use crate::wire::newer::{LaidOutAs, ShareStateSummaryReply};
use crate::wire::str_bytes;

/// How long a call keeps trying while the coordinator cannot be reached or is loading.
const CALL_DEADLINE: Duration = Duration::from_secs(15);
/// One request's timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// The broker that coordinates a key: this one, or another at an address.
enum Where {
    Here,
    At(String),
}

pub struct SharePersister {
    cluster: Arc<Cluster>,
}

impl SharePersister {
    pub fn new(cluster: Arc<Cluster>) -> SharePersister {
        SharePersister { cluster }
    }
}

fn retriable(e: ResponseError) -> bool {
    matches!(
        e,
        ResponseError::NotCoordinator
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::NetworkException
            | ResponseError::RequestTimedOut
    )
}

fn answer(code: i16) -> Result<(), ResponseError> {
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

async fn locate(cluster: &Cluster, key: &str) -> Result<Where, ResponseError> {
    let listener = cluster.node.config.inter_broker_listener().to_string();
    let (id, host, port) = cluster
        .coordinator(CoordinatorKind::Share, key, &listener)
        .await?;
    if id == cluster.node.id() {
        return Ok(Where::Here);
    }
    tracing::debug!(key, coordinator = id, "share state kept by another broker");
    Ok(Where::At(format!("{host}:{port}")))
}

/// Runs `attempt` against `key`'s coordinator until it answers something other than a
/// retriable error, or the deadline passes.
async fn with_retries<T, F, Fut>(
    cluster: &Cluster,
    key: &str,
    attempt: F,
) -> Result<T, ResponseError>
where
    F: Fn(Where) -> Fut,
    Fut: std::future::Future<Output = Result<T, ResponseError>>,
{
    let deadline = tokio::time::Instant::now() + CALL_DEADLINE;
    loop {
        let r = match locate(cluster, key).await {
            Ok(w) => attempt(w).await,
            Err(e) => Err(e),
        };
        match r {
            Err(e) if retriable(e) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
            r => return r,
        }
    }
}

/// Sends `req` (v0) to the share coordinator at `addr` and picks the one partition the
/// answer holds with `first`.
async fn ask<Req: Encodable, Resp: Decodable, P>(
    dial: &Dialer,
    addr: &str,
    api: ApiKey,
    req: &Req,
    first: impl FnOnce(Resp) -> Option<P>,
) -> Result<P, ResponseError> {
    let r: Resp = peer::call(dial, addr, api, 0, req, REQUEST_TIMEOUT).await?;
    first(r).ok_or(ResponseError::UnknownServerError)
}

/// What a leader reads: the snapshot (None without a start offset) and its state epoch.
fn as_read(s: Option<ShareState>) -> (Option<Snapshot>, i32) {
    match s {
        None => (None, 0),
        Some(s) => {
            let epoch = s.state_epoch;
            let snapshot = (s.start >= 0).then_some(Snapshot {
                start: s.start,
                runs: s.runs,
            });
            (snapshot, epoch)
        }
    }
}

async fn read(
    cluster: Arc<Cluster>,
    group: String,
    tp: TopicIdPartition,
    leader_epoch: i32,
) -> Result<(Option<Snapshot>, i32), ResponseError> {
    use read_share_group_state_request::{PartitionData, ReadStateData};
    let k = key(&group, tp.0, tp.1);
    with_retries(&cluster, &k, |at| {
        let (cluster, group, k) = (&cluster, &group, &k);
        async move {
            match at {
                Where::Here => Ok(as_read(
                    cluster
                        .node
                        .share_states
                        .read_as_leader(k, leader_epoch)
                        .await?,
                )),
                Where::At(addr) => {
                    let req = ReadShareGroupStateRequest::default()
                        .with_group_id(str_bytes(group))
                        .with_topics(vec![ReadStateData::default()
                            .with_topic_id(tp.0)
                            .with_partitions(vec![PartitionData::default()
                                .with_partition(tp.1)
                                .with_leader_epoch(leader_epoch)])]);
                    let p = ask(
                        &cluster.node.dial,
                        &addr,
                        ApiKey::ReadShareGroupState,
                        &req,
                        |r: ReadShareGroupStateResponse| {
                            r.results.into_iter().flat_map(|t| t.partitions).next()
                        },
                    )
                    .await?;
                    answer(p.error_code)?;
                    let snapshot = (p.start_offset >= 0).then(|| Snapshot {
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
                    });
                    Ok((snapshot, p.state_epoch))
                }
            }
        }
    })
    .await
}

async fn write(
    cluster: Arc<Cluster>,
    group: String,
    tp: TopicIdPartition,
    leader_epoch: i32,
    state_epoch: i32,
    state: Snapshot,
) -> Result<(), ResponseError> {
    use write_share_group_state_request::{PartitionData, StateBatch, WriteStateData};
    let k = key(&group, tp.0, tp.1);
    with_retries(&cluster, &k, |at| {
        let (cluster, group, k, state) = (&cluster, &group, &k, &state);
        async move {
            match at {
                Where::Here => {
                    let w = StateWrite {
                        state_epoch,
                        leader_epoch,
                        start: state.start,
                        runs: state.runs.clone(),
                    };
                    cluster.node.share_states.write(k, w).await
                }
                Where::At(addr) => {
                    let batches = state
                        .runs
                        .iter()
                        .map(|&(first, last, s, count)| {
                            StateBatch::default()
                                .with_first_offset(first)
                                .with_last_offset(last)
                                .with_delivery_state(s)
                                .with_delivery_count(count)
                        })
                        .collect();
                    let req = WriteShareGroupStateRequest::default()
                        .with_group_id(str_bytes(group))
                        .with_topics(vec![WriteStateData::default()
                            .with_topic_id(tp.0)
                            .with_partitions(vec![PartitionData::default()
                                .with_partition(tp.1)
                                .with_leader_epoch(leader_epoch)
                                .with_state_epoch(state_epoch)
                                .with_start_offset(state.start)
                                .with_state_batches(batches)])]);
                    let p = ask(
                        &cluster.node.dial,
                        &addr,
                        ApiKey::WriteShareGroupState,
                        &req,
                        |r: WriteShareGroupStateResponse| {
                            r.results.into_iter().flat_map(|t| t.partitions).next()
                        },
                    )
                    .await?;
                    answer(p.error_code)
                }
            }
        }
    })
    .await
}

/// Starts `group`'s state of `tp` afresh at `start` in the state epoch after the stored one.
async fn initialize(
    cluster: Arc<Cluster>,
    group: String,
    tp: TopicIdPartition,
    start: i64,
) -> Result<(), ResponseError> {
    use initialize_share_group_state_request::{InitializeStateData, PartitionData};
    let k = key(&group, tp.0, tp.1);
    with_retries(&cluster, &k, |at| {
        let (cluster, group, k) = (&cluster, &group, &k);
        async move {
            match at {
                Where::Here => {
                    let states = &cluster.node.share_states;
                    let epoch = states.read(k)?.map_or(0, |s| s.state_epoch);
                    states.initialize(k, epoch + 1, start).await
                }
                Where::At(addr) => {
                    let (_, epoch) = summary_at(&cluster.node.dial, &addr, group, tp).await?;
                    let req = InitializeShareGroupStateRequest::default()
                        .with_group_id(str_bytes(group))
                        .with_topics(vec![InitializeStateData::default()
                            .with_topic_id(tp.0)
                            .with_partitions(vec![PartitionData::default()
                                .with_partition(tp.1)
                                .with_state_epoch(epoch + 1)
                                .with_start_offset(start)])]);
                    let p = ask(
                        &cluster.node.dial,
                        &addr,
                        ApiKey::InitializeShareGroupState,
                        &req,
                        |r: InitializeShareGroupStateResponse| {
                            r.results.into_iter().flat_map(|t| t.partitions).next()
                        },
                    )
                    .await?;
                    answer(p.error_code)
                }
            }
        }
    })
    .await
}

/// ReadShareGroupStateSummary (v1) at `addr`: the summary (None when never written or
/// without a start), and the state epoch.
async fn summary_at(
    dial: &Dialer,
    addr: &str,
    group: &str,
    tp: TopicIdPartition,
) -> Result<(Option<Summary>, i32), ResponseError> {
    use read_share_group_state_summary_request::{PartitionData, ReadStateSummaryData};
    let req = ReadShareGroupStateSummaryRequest::default()
        .with_group_id(str_bytes(group))
        .with_topics(vec![ReadStateSummaryData::default()
            .with_topic_id(tp.0)
            .with_partitions(
                vec![PartitionData::default().with_partition(tp.1)],
            )]);
    let r: ShareStateSummaryReply = peer::call(
        dial,
        addr,
        ApiKey::ReadShareGroupStateSummary,
        1,
        &LaidOutAs::<_, 0>(req),
        REQUEST_TIMEOUT,
    )
    .await?;
    let p = r
        .response
        .results
        .iter()
        .flat_map(|t| &t.partitions)
        .next()
        .ok_or(ResponseError::UnknownServerError)?;
    answer(p.error_code)?;
    let summary = (p.start_offset >= 0).then(|| Summary {
        start: p.start_offset,
        leader_epoch: p.leader_epoch,
        delivery_complete: r.delivery_complete.get(&tp).copied().unwrap_or(-1),
    });
    Ok((summary, p.state_epoch))
}

async fn summary(
    cluster: Arc<Cluster>,
    group: String,
    tp: TopicIdPartition,
) -> Result<Option<Summary>, ResponseError> {
    let k = key(&group, tp.0, tp.1);
    with_retries(&cluster, &k, |at| {
        let (cluster, group, k) = (&cluster, &group, &k);
        async move {
            match at {
                Where::Here => Ok(cluster
                    .node
                    .share_states
                    .read(k)?
                    .filter(|s| s.start >= 0)
                    .map(|s| Summary {
                        start: s.start,
                        leader_epoch: s.leader_epoch,
                        delivery_complete: delivery_complete(s.start, &s.runs),
                    })),
                Where::At(addr) => Ok(summary_at(&cluster.node.dial, &addr, group, tp).await?.0),
            }
        }
    })
    .await
}

/// Deletes `group`'s state of `tps`, one request per coordinator.
async fn delete(
    cluster: Arc<Cluster>,
    group: String,
    tps: Vec<TopicIdPartition>,
) -> Result<(), ResponseError> {
    use delete_share_group_state_request::{DeleteStateData, PartitionData};
    let listener = cluster.node.config.inter_broker_listener().to_string();
    let mut remote: BTreeMap<String, BTreeMap<uuid::Uuid, Vec<i32>>> = BTreeMap::new();
    for tp in tps {
        let k = key(&group, tp.0, tp.1);
        let (id, host, port) = cluster
            .coordinator(CoordinatorKind::Share, &k, &listener)
            .await?;
        if id == cluster.node.id() {
            cluster.node.share_states.delete(&k).await?;
        } else {
            remote
                .entry(format!("{host}:{port}"))
                .or_default()
                .entry(tp.0)
                .or_default()
                .push(tp.1);
        }
    }
    for (addr, topics) in remote {
        let req = DeleteShareGroupStateRequest::default()
            .with_group_id(str_bytes(&group))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(id, ps)| {
                        DeleteStateData::default()
                            .with_topic_id(id)
                            .with_partitions(
                                ps.into_iter()
                                    .map(|p| PartitionData::default().with_partition(p))
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let r: DeleteShareGroupStateResponse = peer::call(
            &cluster.node.dial,
            &addr,
            ApiKey::DeleteShareGroupState,
            0,
            &req,
            REQUEST_TIMEOUT,
        )
        .await?;
        for p in r.results.iter().flat_map(|t| &t.partitions) {
            answer(p.error_code)?;
        }
    }
    Ok(())
}

impl Persister for SharePersister {
    fn read(
        &self,
        group: &str,
        tp: TopicIdPartition,
        leader_epoch: i32,
    ) -> BoxFuture<'static, Result<(Option<Snapshot>, i32), ResponseError>> {
        Box::pin(read(
            self.cluster.clone(),
            group.to_string(),
            tp,
            leader_epoch,
        ))
    }

    fn write(
        &self,
        group: &str,
        tp: TopicIdPartition,
        leader_epoch: i32,
        state_epoch: i32,
        state: Snapshot,
    ) -> BoxFuture<'static, Result<(), ResponseError>> {
        Box::pin(write(
            self.cluster.clone(),
            group.to_string(),
            tp,
            leader_epoch,
            state_epoch,
            state,
        ))
    }

    fn initialize(
        &self,
        group: &str,
        tp: TopicIdPartition,
        start: i64,
    ) -> BoxFuture<'static, Result<(), ResponseError>> {
        Box::pin(initialize(
            self.cluster.clone(),
            group.to_string(),
            tp,
            start,
        ))
    }

    fn summary(
        &self,
        group: &str,
        tp: TopicIdPartition,
    ) -> BoxFuture<'static, Result<Option<Summary>, ResponseError>> {
        Box::pin(summary(self.cluster.clone(), group.to_string(), tp))
    }

    fn delete(
        &self,
        group: &str,
        tps: Vec<TopicIdPartition>,
    ) -> BoxFuture<'static, Result<(), ResponseError>> {
        Box::pin(delete(self.cluster.clone(), group.to_string(), tps))
    }
}
