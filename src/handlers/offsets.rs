//! OffsetCommit, OffsetFetch and OffsetDelete: committed offsets of consumer groups, kept by
//! [`crate::coordinator`].

use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::RequestContext;
use super::{str_bytes, topic_name};
use crate::broker::authorizer::Access;
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::coordinator::offsets::Committed;
use crate::coordinator::CommitError;
use crate::security::acl::{op, resource};

/// Whether the topic and partition exist.
fn known(broker: &Broker, topic: &str, partition: i32) -> bool {
    broker
        .catalog
        .get(topic)
        .is_some_and(|t| partition >= 0 && (partition as usize) < t.partitions.len())
}

pub async fn commit(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let now = now_ms();
    // Kafka's checks: READ on the group, then READ on each topic.
    let access = ctx.access(broker);
    let group_denied = !access.allows(op::READ, resource::GROUP, &req.group_id);
    let max_metadata = broker.config.offset_metadata_bytes_max;
    // Per partition: Err(code) decided up front, or Ok(offset) to commit.
    type Checked = Vec<(i32, Result<Committed, ResponseError>)>;
    let mut results: Vec<(String, Checked)> = Vec::new();
    for t in &req.topics {
        let topic_denied = !access.allows(op::READ, resource::TOPIC, &t.name);
        let parts = t
            .partitions
            .iter()
            .map(|p| {
                let checked = if req.group_id.is_empty() {
                    Err(ResponseError::InvalidGroupId)
                } else if group_denied {
                    Err(ResponseError::GroupAuthorizationFailed)
                } else if topic_denied {
                    Err(ResponseError::TopicAuthorizationFailed)
                } else if !known(broker, &t.name, p.partition_index) {
                    Err(ResponseError::UnknownTopicOrPartition)
                } else if p
                    .committed_metadata
                    .as_ref()
                    .is_some_and(|m| m.len() > max_metadata)
                {
                    Err(ResponseError::OffsetMetadataTooLarge)
                } else {
                    Ok(Committed {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                        commit_ms: now,
                    })
                };
                (p.partition_index, checked)
            })
            .collect();
        results.push((t.name.to_string(), parts));
    }
    let to_commit: Vec<(String, i32, Committed)> = results
        .iter()
        .flat_map(|(t, ps)| {
            ps.iter()
                .filter_map(|(p, r)| r.as_ref().ok().map(|c| (t.clone(), *p, c.clone())))
        })
        .collect();
    // Asked even with nothing to commit: a broker that does not coordinate the group says
    // so on every partition.
    let committed = if req.group_id.is_empty() || group_denied {
        Ok(())
    } else {
        broker
            .groups
            .commit(
                &req.group_id,
                &req.member_id,
                req.group_instance_id.as_deref(),
                req.generation_id_or_member_epoch,
                to_commit,
            )
            .await
    };
    let topics = results
        .into_iter()
        .map(|(t, ps)| {
            OffsetCommitResponseTopic::default()
                .with_name(topic_name(&t))
                .with_partitions(
                    ps.into_iter()
                        .map(|(p, r)| {
                            let error = match (committed, r) {
                                (Err(CommitError::Routing(e)), _) => Some(e),
                                (_, Err(e)) => Some(e),
                                (Err(CommitError::Refused(e)), Ok(_)) => Some(e),
                                (Ok(()), Ok(_)) => None,
                            };
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p)
                                .with_error_code(error.map_or(0, |e| e.code()))
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// The committed offsets of one group, grouped by topic: (topic, [(partition, offset)]).
/// A topic the principal may not describe is in it only when asked for by name, with
/// TOPIC_AUTHORIZATION_FAILED as its error.
type OffsetsByTopic = Vec<(String, Option<ResponseError>, Vec<(i32, Option<Committed>)>)>;

/// Kafka's checks: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED), then on each
/// topic.
fn fetch_group(
    broker: &Broker,
    access: &Access,
    group: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
) -> Result<OffsetsByTopic, ResponseError> {
    if !access.allows(op::DESCRIBE, resource::GROUP, group) {
        return Err(ResponseError::GroupAuthorizationFailed);
    }
    let named = wanted.is_some();
    let mut out: OffsetsByTopic = Vec::new();
    for (t, p, c) in broker.groups.committed(group, wanted)? {
        match out.last_mut() {
            Some((last, _, ps)) if *last == t => ps.push((p, c)),
            _ => {
                let denied = !access.allows(op::DESCRIBE, resource::TOPIC, &t);
                out.push((
                    t,
                    denied.then_some(ResponseError::TopicAuthorizationFailed),
                    vec![(p, c)],
                ))
            }
        }
    }
    if !named {
        out.retain(|(_, denied, _)| denied.is_none());
    }
    Ok(out)
}

fn unstable_code(unstable: bool) -> i16 {
    match unstable {
        true => ResponseError::UnstableOffsetCommit.code(),
        false => 0,
    }
}

/// (offset, leader epoch, metadata) as OffsetFetch answers them; -1 and "" when nothing
/// is committed.
fn fields(c: Option<Committed>) -> (i64, i32, String) {
    match c {
        Some(c) => (c.offset, c.leader_epoch, c.metadata.unwrap_or_default()),
        None => (-1, -1, String::new()),
    }
}

pub async fn fetch(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: OffsetFetchRequest,
) -> OffsetFetchResponse {
    if ctx.version < 8 {
        let wanted = req.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                .collect()
        });
        let access = ctx.access(broker);
        let offsets = match fetch_group(broker, &access, &req.group_id, wanted) {
            Ok(offsets) => offsets,
            Err(e) => return not_coordinator(ctx.version, e, req.topics),
        };
        // KIP-447: with require_stable, an offset a transaction holds pending answers
        // UNSTABLE_OFFSET_COMMIT (the consumer retries) instead of the older commit.
        let stable = ctx.version >= 7 && req.require_stable;
        let topics = offsets
            .into_iter()
            .map(|(t, denied, ps)| {
                OffsetFetchResponseTopic::default()
                    .with_name(topic_name(&t))
                    .with_partitions(
                        ps.into_iter()
                            .map(|(p, c)| {
                                let unstable =
                                    stable && broker.groups.has_pending(&req.group_id, &t, p);
                                let hidden = unstable || denied.is_some();
                                let (offset, epoch, metadata) = fields(c.filter(|_| !hidden));
                                let r = OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(offset)
                                    .with_metadata(Some(str_bytes(metadata)))
                                    .with_error_code(
                                        denied.map_or(unstable_code(unstable), |e| e.code()),
                                    );
                                if ctx.version >= 5 {
                                    r.with_committed_leader_epoch(epoch)
                                } else {
                                    r
                                }
                            })
                            .collect(),
                    )
            })
            .collect();
        return OffsetFetchResponse::default().with_topics(topics);
    }
    let access = ctx.access(broker);
    let groups = req
        .groups
        .into_iter()
        .map(|g| {
            let wanted = g.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name.to_string(), t.partition_indexes))
                    .collect()
            });
            let offsets = match fetch_group(broker, &access, &g.group_id, wanted) {
                Ok(offsets) => offsets,
                Err(e) => {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(e.code())
                }
            };
            let topics = offsets
                .into_iter()
                .map(|(t, denied, ps)| {
                    OffsetFetchResponseTopics::default()
                        .with_name(topic_name(&t))
                        .with_partitions(
                            ps.into_iter()
                                .map(|(p, c)| {
                                    let unstable = req.require_stable
                                        && broker.groups.has_pending(&g.group_id, &t, p);
                                    let hidden = unstable || denied.is_some();
                                    let (offset, epoch, metadata) = fields(c.filter(|_| !hidden));
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(offset)
                                        .with_committed_leader_epoch(epoch)
                                        .with_metadata(Some(str_bytes(metadata)))
                                        .with_error_code(
                                            denied.map_or(unstable_code(unstable), |e| e.code()),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect();
            OffsetFetchResponseGroup::default()
                .with_group_id(g.group_id)
                .with_topics(topics)
        })
        .collect();
    OffsetFetchResponse::default().with_groups(groups)
}

/// OffsetFetch v0-7 from a broker that does not coordinate the group: the error at the
/// top (v2+), or on every partition asked for (v0-1, which have no top-level error).
fn not_coordinator(
    version: i16,
    e: ResponseError,
    topics: Option<Vec<kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic>>,
) -> OffsetFetchResponse {
    if version >= 2 {
        return OffsetFetchResponse::default().with_error_code(e.code());
    }
    let topics = topics
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            OffsetFetchResponseTopic::default()
                .with_name(t.name)
                .with_partitions(
                    t.partition_indexes
                        .into_iter()
                        .map(|p| {
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(-1)
                                .with_metadata(Some(str_bytes(String::new())))
                                .with_error_code(e.code())
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

pub async fn delete(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    // Kafka's checks: DELETE on the group, READ on each topic.
    let access = ctx.access(broker);
    if !access.allows(op::DELETE, resource::GROUP, &req.group_id) {
        return OffsetDeleteResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let (readable, unreadable): (Vec<_>, Vec<_>) = req
        .topics
        .iter()
        .partition(|t| access.allows(op::READ, resource::TOPIC, &t.name));
    let partitions =
        |t: &&kafka_protocol::messages::offset_delete_request::OffsetDeleteRequestTopic| {
            (
                t.name.to_string(),
                t.partitions
                    .iter()
                    .map(|p| p.partition_index)
                    .collect::<Vec<i32>>(),
            )
        };
    let (known_topics, unknown): (Vec<_>, Vec<_>) = readable
        .iter()
        .map(partitions)
        .partition(|(t, _)| broker.catalog.get(t).is_some());
    let unreadable: Vec<_> = unreadable.iter().map(partitions).collect();
    let deleted = match broker
        .groups
        .delete_offsets(&req.group_id, &known_topics)
        .await
    {
        Ok(d) => d,
        Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
    };
    let mut topics: Vec<OffsetDeleteResponseTopic> = Vec::new();
    let rows = deleted
        .into_iter()
        .chain(unknown.into_iter().flat_map(|(t, ps)| {
            ps.into_iter()
                .map(move |p| (t.clone(), p, Some(ResponseError::UnknownTopicOrPartition)))
        }))
        .chain(unreadable.into_iter().flat_map(|(t, ps)| {
            ps.into_iter()
                .map(move |p| (t.clone(), p, Some(ResponseError::TopicAuthorizationFailed)))
        }));
    for (t, p, e) in rows {
        let part = OffsetDeleteResponsePartition::default()
            .with_partition_index(p)
            .with_error_code(e.map_or(0, |e| e.code()));
        match topics.iter_mut().find(|x| x.name.as_str() == t) {
            Some(x) => x.partitions.push(part),
            None => topics.push(
                OffsetDeleteResponseTopic::default()
                    .with_name(topic_name(&t))
                    .with_partitions(vec![part]),
            ),
        }
    }
    OffsetDeleteResponse::default().with_topics(topics)
}
