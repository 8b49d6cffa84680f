//! Transactions (KIP-98, KIP-447, KIP-664, KIP-890): the requests of transactional producers
//! (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit), the coordinator's
//! markers to leaders (WriteTxnMarkers), the leaders' verification (AddPartitionsToTxn v4+)
//! and the admin views kafka-transactions.sh uses (DescribeTransactions, ListTransactions,
//! DescribeProducers). The transaction coordinator and the logs do the work.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_transactions_response::{self, TopicData};
use kafka_protocol::messages::list_transactions_response;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::{str_bytes, topic_name, RequestContext};
use crate::broker::authorizer::{denied, Access};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::coordinator::offsets::Committed;
use crate::coordinator::transactions::{TxnPartition, TxnState};
use crate::error::Error;
use crate::security::acl::{op, resource};
use crate::topics::OFFSETS_TOPIC;

/// PRODUCER_FENCED is newer than some versions: those get INVALID_PRODUCER_EPOCH, as Kafka
/// answers them.
fn fenced_for(e: ResponseError, version: i16, first_with_fenced: i16) -> ResponseError {
    match e {
        ResponseError::ProducerFenced if version < first_with_fenced => {
            ResponseError::InvalidProducerEpoch
        }
        e => e,
    }
}

fn code(r: Result<(), ResponseError>) -> i16 {
    r.err().map_or(0, |e| e.code())
}

/// The partitions of `topics` that exist, and an error for each that does not. Clients may
/// not name internal topics; brokers (`from_broker`) may: a group coordinator adds its
/// `__consumer_offsets` partition for a TxnOffsetCommit of transaction version 2. A
/// client needs WRITE on each topic.
fn known_partitions(
    broker: &Broker,
    access: &Access,
    topics: &[AddPartitionsToTxnTopic],
    from_broker: bool,
) -> (Vec<TxnPartition>, Vec<(TxnPartition, ResponseError)>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for t in topics {
        let denied = !from_broker && !access.allows(op::WRITE, resource::TOPIC, &t.name);
        for p in &t.partitions {
            let tp = (t.name.to_string(), *p);
            if denied {
                bad.push((tp, ResponseError::TopicAuthorizationFailed));
                continue;
            }
            match broker.catalog.partition(&tp.0, *p) {
                Ok((topic, _)) if topic.is_internal() && !from_broker => {
                    bad.push((tp, ResponseError::TopicAuthorizationFailed))
                }
                Ok(_) => ok.push(tp),
                Err(_) => bad.push((tp, ResponseError::UnknownTopicOrPartition)),
            }
        }
    }
    (ok, bad)
}

fn topic_results(
    results: impl IntoIterator<Item = (TxnPartition, i16)>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> = BTreeMap::new();
    for ((t, p), code) in results {
        by_topic.entry(t).or_default().push(
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(p)
                .with_partition_error_code(code),
        );
    }
    by_topic
        .into_iter()
        .map(|(t, rs)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic_name(&t))
                .with_results_by_partition(rs)
        })
        .collect()
}

/// Adds (or, for a leader's KIP-890 check, verifies) partitions of one transaction; one
/// error code per partition.
async fn add_or_verify(
    broker: &Broker,
    access: &Access,
    version: i16,
    (id, producer_id, epoch): (&str, i64, i16),
    topics: &[AddPartitionsToTxnTopic],
    verify_only: bool,
) -> Vec<(TxnPartition, i16)> {
    let (ok, bad) = known_partitions(broker, access, topics, version >= 4);
    if verify_only {
        // Every partition answers for itself; a missing one is simply not in the transaction.
        let mut out: Vec<(TxnPartition, i16)> =
            bad.into_iter().map(|(p, e)| (p, e.code())).collect();
        for p in ok {
            let r = broker.txns.verify(id, producer_id, epoch, &p);
            out.push((p, code(r)));
        }
        return out;
    }
    if !bad.is_empty() {
        // Kafka adds nothing when any partition is bad: the others are not attempted.
        let mut out: Vec<(TxnPartition, i16)> =
            bad.into_iter().map(|(p, e)| (p, e.code())).collect();
        out.extend(
            ok.into_iter()
                .map(|p| (p, ResponseError::OperationNotAttempted.code())),
        );
        return out;
    }
    let r = broker
        .txns
        .add_partitions(id, producer_id, epoch, &ok, version >= 5 && !verify_only)
        .await
        .map_err(|e| fenced_for(e, version, 2));
    let c = code(r);
    ok.into_iter().map(|p| (p, c)).collect()
}

pub async fn add_partitions(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let v = ctx.version;
    // Kafka's checks: a client needs WRITE on the transactional id (and on each topic); the
    // brokers' batched form (v4+) CLUSTER_ACTION.
    let access = ctx.access(broker);
    if v <= 3 {
        if !access.allows(
            op::WRITE,
            resource::TRANSACTIONAL_ID,
            &req.v3_and_below_transactional_id,
        ) {
            let all = req.v3_and_below_topics.iter().flat_map(|t| {
                t.partitions.iter().map(|p| {
                    let c = ResponseError::TransactionalIdAuthorizationFailed.code();
                    ((t.name.to_string(), *p), c)
                })
            });
            return AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(topic_results(all));
        }
        let results = add_or_verify(
            broker,
            &access,
            v,
            (
                req.v3_and_below_transactional_id.as_str(),
                req.v3_and_below_producer_id.0,
                req.v3_and_below_producer_epoch,
            ),
            &req.v3_and_below_topics,
            false,
        )
        .await;
        return AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(topic_results(results));
    }
    // v4+: brokers only, several transactions at once (KIP-890).
    if !access.allows_cluster(op::CLUSTER_ACTION) {
        return AddPartitionsToTxnResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let mut out = Vec::with_capacity(req.transactions.len());
    for t in &req.transactions {
        let results = add_or_verify(
            broker,
            &access,
            v,
            (
                t.transactional_id.as_str(),
                t.producer_id.0,
                t.producer_epoch,
            ),
            &t.topics,
            t.verify_only,
        )
        .await;
        out.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(topic_results(results)),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(out)
}

pub async fn add_offsets(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    // Kafka's checks: WRITE on the transactional id, READ on the group.
    let access = ctx.access(broker);
    if !access.allows(op::WRITE, resource::TRANSACTIONAL_ID, &req.transactional_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
    }
    if !access.allows(op::READ, resource::GROUP, &req.group_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    // The group's offsets partition joins the transaction; its marker then commits the
    // offsets TxnOffsetCommit left pending.
    let partition = broker.offsets_partition(&req.group_id);
    let r = broker
        .txns
        .add_partitions(
            &req.transactional_id,
            req.producer_id.0,
            req.producer_epoch,
            &[(OFFSETS_TOPIC.to_string(), partition)],
            false,
        )
        .await
        .map_err(|e| fenced_for(e, ctx.version, 2));
    AddOffsetsToTxnResponse::default().with_error_code(code(r))
}

pub async fn end_txn(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: EndTxnRequest,
) -> EndTxnResponse {
    // Kafka's check: WRITE on the transactional id.
    let allowed =
        ctx.access(broker)
            .allows(op::WRITE, resource::TRANSACTIONAL_ID, &req.transactional_id);
    let r = match allowed {
        false => Err(ResponseError::TransactionalIdAuthorizationFailed),
        true => broker
            .txns
            .end_txn(
                &req.transactional_id,
                req.producer_id.0,
                req.producer_epoch,
                req.committed,
                ctx.version >= 5,
            )
            .await
            .map_err(|e| fenced_for(e, ctx.version, 2)),
    };
    let base = EndTxnResponse::default()
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    match r {
        Ok((pid, epoch)) if ctx.version >= 5 => {
            base.with_producer_id(pid.into()).with_producer_epoch(epoch)
        }
        Ok(_) => base,
        Err(e) => base.with_error_code(e.code()),
    }
}

pub async fn txn_offset_commit(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let now = now_ms();
    // Kafka's checks: WRITE on the transactional id, READ on the group, READ on each topic.
    let access = ctx.access(broker);
    let refused = if !access.allows(op::WRITE, resource::TRANSACTIONAL_ID, &req.transactional_id) {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !access.allows(op::READ, resource::GROUP, &req.group_id) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else {
        None
    };
    let unreadable: std::collections::BTreeSet<&str> = req
        .topics
        .iter()
        .filter(|t| !access.allows(op::READ, resource::TOPIC, &t.name))
        .map(|t| t.name.as_str())
        .collect();
    let offsets: Vec<(String, i32, Committed)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    t.name.to_string(),
                    p.partition_index,
                    Committed {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                        commit_ms: now,
                    },
                )
            })
        })
        .collect();
    let (member, instance, generation) = match ctx.version >= 3 {
        true => (
            req.member_id.to_string(),
            req.group_instance_id.as_ref().map(|s| s.to_string()),
            req.generation_id,
        ),
        false => (String::new(), None, -1),
    };
    // KIP-890: the group's offsets partition must be in the producer's transaction (part
    // 1), or, for transaction version 2 (v5, whose clients send no AddOffsetsToTxn), is
    // added to it here (part 2).
    let checked = match (refused, unreadable.is_empty()) {
        (Some(e), _) => Err(e),
        // Kafka commits nothing when a topic is refused: the others are not attempted.
        (None, false) => Err(ResponseError::OperationNotAttempted),
        (None, true) => broker.groups.route(&req.group_id),
    };
    let verified = match checked {
        Ok(()) => broker
            .verify_txn(
                &req.transactional_id,
                req.producer_id.0,
                req.producer_epoch,
                &[(
                    OFFSETS_TOPIC.to_string(),
                    broker.offsets_partition(&req.group_id),
                )],
                ctx.version >= 5,
            )
            .await
            .remove(0)
            .map_err(|e| match e {
                ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
                ResponseError::TransactionAbortable if ctx.version <= 3 => {
                    ResponseError::InvalidTxnState
                }
                ResponseError::TransactionAbortable
                | ResponseError::ConcurrentTransactions
                | ResponseError::InvalidProducerIdMapping
                | ResponseError::InvalidProducerEpoch
                | ResponseError::InvalidTxnState => e,
                // The transaction coordinator could not answer: the client retries.
                _ => ResponseError::CoordinatorNotAvailable,
            }),
        Err(e) => Err(e),
    };
    let r = match verified {
        Err(e) => Err(e),
        Ok(()) => {
            broker
                .groups
                .txn_commit(
                    &req.group_id,
                    (req.producer_id.0, req.producer_epoch),
                    &member,
                    instance.as_deref(),
                    generation,
                    offsets,
                )
                .await
        }
    };
    let c = code(r);
    let topics = req
        .topics
        .iter()
        .map(|t| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            let c = match unreadable.contains(t.name.as_str()) && refused.is_none()
                            {
                                true => ResponseError::TopicAuthorizationFailed.code(),
                                false => c,
                            };
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(c)
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

pub async fn write_txn_markers(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    // Kafka's check: CLUSTER_ACTION (brokers only).
    let allowed = ctx.access(broker).allows_cluster(op::CLUSTER_ACTION);
    let mut markers = Vec::with_capacity(req.markers.len());
    for m in &req.markers {
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in &m.topics {
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for p in &t.partition_indexes {
                let r = match allowed {
                    false => Err(Error::Authorization(
                        ResponseError::ClusterAuthorizationFailed,
                    )),
                    true => {
                        broker
                            .write_marker(
                                &t.name,
                                *p,
                                m.producer_id.0,
                                m.producer_epoch,
                                m.transaction_result,
                                m.coordinator_epoch,
                            )
                            .await
                    }
                };
                partitions.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(*p)
                        .with_error_code(r.err().map_or(0, |e| e.code())),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions),
            );
        }
        markers.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}

pub async fn describe_transactions(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    // Kafka's check: DESCRIBE on each transactional id.
    let access = ctx.access(broker);
    let states = req
        .transactional_ids
        .iter()
        .map(|id| {
            let s = describe_transactions_response::TransactionState::default()
                .with_transactional_id(id.clone())
                .with_producer_id((-1).into())
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1)
                .with_transaction_state(str_bytes(""));
            if !access.allows(op::DESCRIBE, resource::TRANSACTIONAL_ID, id) {
                return s.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
            }
            match broker.txns.describe(id) {
                Err(e) => s.with_error_code(e.code()),
                Ok(m) => {
                    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for (t, p) in &m.partitions {
                        topics.entry(t.clone()).or_default().push(*p);
                    }
                    s.with_transaction_state(str_bytes(m.state.name()))
                        .with_transaction_timeout_ms(m.timeout_ms)
                        .with_transaction_start_time_ms(m.start_ms)
                        .with_producer_id(m.producer_id.into())
                        .with_producer_epoch(m.producer_epoch)
                        .with_topics(
                            topics
                                .into_iter()
                                .map(|(t, ps)| {
                                    TopicData::default()
                                        .with_topic(topic_name(&t))
                                        .with_partitions(ps)
                                })
                                .collect(),
                        )
                }
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

pub async fn list_transactions(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    // Kafka lists the transactional ids the principal may describe.
    let access = ctx.access(broker);
    // v2 (KIP-1152): a Java regular expression the whole id must match; empty is none.
    let pattern = match req
        .transactional_id_pattern
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        None => None,
        Some(p) => match regex::Regex::new(&format!("^(?:{p})$")) {
            Ok(r) => Some(r),
            Err(_) => {
                return ListTransactionsResponse::default()
                    .with_error_code(ResponseError::InvalidRegularExpression.code())
            }
        },
    };
    let known = |s: &str| (0..8).filter_map(TxnState::from_id).any(|k| k.name() == s);
    let unknown: Vec<_> = req
        .state_filters
        .iter()
        .filter(|s| !known(s))
        .cloned()
        .collect();
    let now = now_ms();
    let listed = broker.txns.transactions(&|m| {
        (req.state_filters.is_empty()
            || req
                .state_filters
                .iter()
                .any(|s| s.as_str() == m.state.name()))
            && (req.producer_id_filters.is_empty()
                || req.producer_id_filters.iter().any(|p| p.0 == m.producer_id))
            && (req.duration_filter < 0
                || (m.start_ms >= 0 && now - m.start_ms >= req.duration_filter))
            && pattern
                .as_ref()
                .is_none_or(|r| r.is_match(&m.transactional_id))
            && access.allows(
                op::DESCRIBE,
                resource::TRANSACTIONAL_ID,
                &m.transactional_id,
            )
    });
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(
            listed
                .into_iter()
                .map(|m| {
                    list_transactions_response::TransactionState::default()
                        .with_transactional_id(str_bytes(m.transactional_id.as_str()).into())
                        .with_producer_id(m.producer_id.into())
                        .with_transaction_state(str_bytes(m.state.name()))
                })
                .collect(),
        )
}

pub async fn describe_producers(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    // Kafka's check: READ on each topic.
    let access = ctx.access(broker);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let allowed = access.allows(op::READ, resource::TOPIC, &t.name);
        let mut partitions = Vec::with_capacity(t.partition_indexes.len());
        for p in &t.partition_indexes {
            let r = PartitionResponse::default().with_partition_index(*p);
            let found = match allowed {
                true => broker.led_partition(&t.name, *p),
                false => Err(denied(resource::TOPIC)),
            };
            partitions.push(match found {
                Err(e) => r.with_error_code(e.code()).with_error_message(e.message()),
                Ok((_, part)) => r.with_active_producers(
                    part.log
                        .producers()
                        .await
                        .into_iter()
                        .map(|s| {
                            ProducerState::default()
                                .with_producer_id(s.producer_id.into())
                                .with_producer_epoch(s.producer_epoch as i32)
                                .with_last_sequence(s.last_sequence)
                                .with_last_timestamp(s.last_timestamp)
                                .with_coordinator_epoch(s.coordinator_epoch)
                                .with_current_txn_start_offset(s.txn_first_offset.unwrap_or(-1))
                        })
                        .collect(),
                ),
            });
        }
        topics.push(
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions),
        );
    }
    DescribeProducersResponse::default().with_topics(topics)
}
