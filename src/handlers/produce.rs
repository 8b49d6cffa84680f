//! Produce: validate each partition's batch and append it; partitions of one request are
//! appended concurrently, so several partitions' writes share storage group commits.
//! acks=0 gets no response at all. From v13 (KIP-516) a request names its topics by id;
//! an id this broker does not know gets UNKNOWN_TOPIC_ID for each partition.

use std::sync::Arc;

use futures_util::future::join_all;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};
use kafka_protocol::ResponseError;

use super::leader_hints::{node_endpoints, Hints};
use super::RequestContext;
use crate::broker::authorizer::denied;
use crate::broker::throttle::Kind;
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::log::batch::{self, BatchHeader};
use crate::log::{AppendOptions, Appended};
use crate::security::acl::{op, resource};
use crate::topics::{Partition, Topic};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ProduceRequest,
) -> Option<ProduceResponse> {
    let version = ctx.version;
    let acks = req.acks;
    let timeout = std::time::Duration::from_millis(req.timeout_ms.max(0) as u64);
    let txn_id = req
        .transactional_id
        .as_ref()
        .filter(|t| !t.is_empty())
        .map(|t| t.to_string());
    let txn_id = txn_id.as_deref();
    let bad_acks = !(-1..=1).contains(&acks);
    // Kafka's checks: WRITE on the transactional id for transactional batches (else the
    // whole request fails), then WRITE on each topic.
    let access = ctx.access(broker);
    let txn_denied =
        txn_id.is_some_and(|id| !access.allows(op::WRITE, resource::TRANSACTIONAL_ID, id));
    // Each partition's batch, checked first: a transactional batch whose producer has no
    // transaction open on the partition is verified with the transaction coordinator, all
    // of a request's such partitions in one call, as Kafka does (one AddPartitionsToTxn per
    // request: a call per partition would contend on the coordinator's transaction).
    let mut slots: Vec<Slot> = Vec::new();
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for topic in req.topic_data {
        // Shared by the topic's slots (no copy of the name per partition).
        let name: Option<Arc<str>> = match version >= 13 {
            true => broker
                .catalog
                .get_by_id(topic.topic_id)
                .map(|t| Arc::from(t.name.as_str())),
            false => Some(Arc::from(topic.name.as_str())),
        };
        let first = slots.len();
        let topic_denied = name
            .as_ref()
            .is_some_and(|n| !access.allows(op::WRITE, resource::TOPIC, n));
        for p in topic.partition_data {
            let records = p.records.unwrap_or_default();
            let check = if bad_acks {
                Err(Error::InvalidRequest(format!(
                    "acks must be -1, 0 or 1, not {acks}"
                )))
            } else if txn_denied {
                Err(denied(resource::TRANSACTIONAL_ID))
            } else if topic_denied {
                Err(denied(resource::TOPIC))
            } else if let Some(name) = &name {
                check_transactional(broker, txn_id, name, p.index, &records).await
            } else {
                Err(Error::UnknownTopicId)
            };
            slots.push(Slot {
                name: name.clone(),
                index: p.index,
                records,
                check,
            });
        }
        topics.push((topic.name, topic.topic_id, first..slots.len()));
    }
    if let Some(id) = txn_id {
        verify(broker, id, &mut slots, version).await;
    }
    let mut results = join_all(slots.into_iter().map(|s| async move {
        let result = match (s.check, s.name) {
            (Ok(_), Some(name)) => append(broker, &name, s.index, s.records, acks, timeout).await,
            (Ok(_), None) => Err(Error::UnknownTopicId),
            (Err(e), _) => Err(e),
        };
        Some(fit(partition_response(s.index, result), version))
    }))
    .await;
    // As Kafka: the request's bytes count against the client's produce quota once
    // appended; a throttle mutes the connection, acks=0 included, which gets no answer.
    let throttle = ctx
        .throttle(broker, Kind::Produce, || ctx.request_bytes as f64)
        .map_or(0, |(ms, _, _)| ms);
    if acks == 0 {
        return None;
    }
    let mut hints = Hints::new(broker, &ctx.conn.listener);
    let responses = topics
        .into_iter()
        .map(|(name, topic_id, range)| {
            let mut partitions: Vec<PartitionProduceResponse> =
                results[range].iter_mut().filter_map(Option::take).collect();
            if version >= 10 && partitions.iter().any(|p| p.error_code != 0) {
                let topic = match version >= 13 {
                    true => broker.catalog.get_by_id(topic_id),
                    false => broker.catalog.get(name.as_str()),
                };
                for p in &mut partitions {
                    if let Some((id, epoch)) = hints.leader(topic.as_deref(), p.index, p.error_code)
                    {
                        p.current_leader = LeaderIdAndEpoch::default()
                            .with_leader_id(BrokerId(id))
                            .with_leader_epoch(epoch);
                    }
                }
            }
            TopicProduceResponse::default()
                .with_name(name)
                .with_topic_id(topic_id)
                .with_partition_responses(partitions)
        })
        .collect();
    Some(
        ProduceResponse::default()
            .with_throttle_time_ms(throttle as i32)
            .with_responses(responses)
            .with_node_endpoints(node_endpoints!(hints, NodeEndpoint)),
    )
}

/// One partition of a request on its way to the log.
struct Slot {
    name: Option<Arc<str>>,
    index: i32,
    records: bytes::Bytes,
    /// Err: answered without appending; Ok(Some(producer)): the transaction coordinator
    /// must first confirm the partition is in that producer's transaction.
    check: Result<Option<(i64, i16)>>,
}

/// A transactional producer's batch: it must be transactional, and its producer must be in
/// a transaction that includes this partition. Ok(Some((producer id, epoch))) when the
/// partition has no transaction of the producer open: the coordinator is then asked
/// (KIP-890), so a late write after the transaction ended cannot start a hanging one.
async fn check_transactional(
    broker: &Broker,
    txn_id: Option<&str>,
    topic: &str,
    index: i32,
    records: &bytes::Bytes,
) -> Result<Option<(i64, i16)>> {
    let Ok(h) = crate::log::batch::BatchHeader::parse(records) else {
        // The append's validation answers a malformed batch.
        return Ok(None);
    };
    match (txn_id, h.is_transactional()) {
        (None, false) => return Ok(None),
        (Some(_), true) => {}
        (Some(_), false) => {
            return Err(Error::InvalidRecord(
                "a transactional producer's batch must be transactional".into(),
            ))
        }
        (None, true) => {
            return Err(Error::InvalidRecord(
                "a transactional batch needs the producer's transactional id".into(),
            ))
        }
    };
    let (_, p) = broker.catalog.partition(topic, index)?;
    if p.log.has_open_txn(h.producer_id, h.producer_epoch).await {
        return Ok(None);
    }
    Ok(Some((h.producer_id, h.producer_epoch)))
}

/// Asks the transaction coordinator of `id` about every slot that needs it, one call per
/// producer (a request holds one): Produce v12+ is transaction version 2's, whose client
/// added no partition, so the leader adds it (KIP-890 part 2); older versions have it
/// verified (part 1) unless `transaction.partition.verification.enable` is off. A slot the coordinator refuses gets its error in the producer's terms.
async fn verify(broker: &Broker, id: &str, slots: &mut [Slot], version: i16) {
    let add = version >= 12;
    if !add && !broker.config.cluster.transaction_partition_verification {
        // Kafka's transaction.partition.verification.enable=false: older producers' batches
        // are trusted, as before KIP-890 (a late one can leave a hanging transaction).
        return;
    }
    let mut by_producer: std::collections::BTreeMap<(i64, i16), Vec<usize>> = Default::default();
    for (i, s) in slots.iter().enumerate() {
        if let (Ok(Some(producer)), Some(_)) = (&s.check, &s.name) {
            by_producer.entry(*producer).or_default().push(i);
        }
    }
    for ((producer_id, epoch), at) in by_producer {
        let partitions: Vec<_> = at
            .iter()
            .map(|&i| {
                let name = slots[i].name.as_deref().unwrap_or_default();
                (name.to_string(), slots[i].index)
            })
            .collect();
        let answers = broker
            .verify_txn(id, producer_id, epoch, &partitions, add)
            .await;
        for (i, answer) in at.into_iter().zip(answers) {
            if let Err(e) = answer {
                slots[i].check = Err(Error::Transaction(match e {
                    ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
                    ResponseError::TransactionAbortable if version <= 10 => {
                        ResponseError::InvalidTxnState
                    }
                    ResponseError::ConcurrentTransactions if add => e,
                    ResponseError::TransactionAbortable
                    | ResponseError::InvalidProducerIdMapping
                    | ResponseError::InvalidProducerEpoch
                    | ResponseError::InvalidTxnState
                    | ResponseError::UnknownTopicOrPartition => e,
                    // The coordinator could not answer: retriable for the producer.
                    _ => ResponseError::NotEnoughReplicas,
                }));
            }
        }
    }
}

async fn append(
    broker: &Broker,
    topic: &str,
    index: i32,
    records: bytes::Bytes,
    acks: i16,
    timeout: std::time::Duration,
) -> Result<(Appended, i64)> {
    let (t, p) = broker.catalog.partition(topic, index)?;
    if t.is_internal() {
        return Err(Error::InvalidTopic(format!(
            "cannot append to internal topic {topic}"
        )));
    }
    let m = &t.metrics;
    m.produce_requests.inc();
    let size = records.len() as u64;
    let result = append_to(&t, &p, broker.node_id(), records, acks, timeout).await;
    match &result {
        Ok((a, _)) if !a.duplicate => {
            m.messages_in.inc_by(a.records);
            m.bytes_in.inc_by(size);
        }
        Ok(_) => {}
        Err(_) => m.failed_produce_requests.inc(),
    }
    result
}

async fn append_to(
    t: &Topic,
    p: &Partition,
    node: i32,
    records: bytes::Bytes,
    acks: i16,
    timeout: std::time::Duration,
) -> Result<(Appended, i64)> {
    let e = t.effective;
    let place = p.placement();
    if place.leader != node {
        return Err(Error::NotLeaderOrFollower);
    }
    if e.compact {
        refuse_keyless(t, p.index, &records)?;
    }
    if acks == -1 {
        let isr = place.isr.len();
        if (isr as i32) < e.min_insync_replicas {
            return Err(Error::NotEnoughReplicas {
                isr,
                min: e.min_insync_replicas,
            });
        }
    }
    let log_append_time = e.log_append_time.then(now_ms);
    let appended = p
        .log
        .append(
            &records,
            AppendOptions {
                max_message_bytes: e.max_message_bytes,
                durable: e.flush_each_append,
                log_append_time_ms: log_append_time,
            },
        )
        .await?;
    if acks == -1 {
        crate::replication::await_committed(
            p,
            node,
            place.leader_epoch,
            appended.base_offset + appended.records.max(1) as i64,
            e.min_insync_replicas,
            timeout,
        )
        .await?;
    }
    Ok((appended, log_append_time.unwrap_or(-1)))
}

/// A compacted topic keeps the latest record of each key, so Kafka refuses records
/// without one there. A batch whose header does not parse is left to the log's
/// validation, which names what is wrong with it; records that do not parse are corrupt.
fn refuse_keyless(t: &Topic, index: i32, records: &[u8]) -> Result<()> {
    let Ok(h) = BatchHeader::parse(records) else {
        return Ok(());
    };
    if h.is_control() {
        return Ok(());
    }
    let indexes = batch::keyless_records(records, &h)?;
    if indexes.is_empty() {
        return Ok(());
    }
    Err(Error::KeylessRecords {
        partition: format!("{}-{index}", t.name),
        indexes,
    })
}

/// Resets what `version` lacks: such fields must keep their defaults to be encodable.
fn fit(mut r: PartitionProduceResponse, version: i16) -> PartitionProduceResponse {
    if version < 5 {
        r.log_start_offset = -1;
    }
    if version < 8 {
        r.error_message = None;
        r.record_errors.clear();
    }
    r
}

fn partition_response(index: i32, result: Result<(Appended, i64)>) -> PartitionProduceResponse {
    let r = PartitionProduceResponse::default().with_index(index);
    match result {
        Ok((a, log_append_time)) => r
            .with_base_offset(a.base_offset)
            .with_log_append_time_ms(log_append_time)
            .with_log_start_offset(a.log_start_offset),
        Err(e) => {
            if matches!(e, Error::Storage(_)) {
                tracing::error!(partition = index, error = %e, "append failed in storage");
            }
            let record_errors = match &e {
                Error::KeylessRecords { indexes, .. } => indexes
                    .iter()
                    .map(|i| {
                        BatchIndexAndErrorMessage::default()
                            .with_batch_index(*i)
                            .with_batch_index_error_message(e.message())
                    })
                    .collect(),
                _ => Vec::new(),
            };
            r.with_error_code(e.code())
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1)
                .with_error_message(e.message())
                .with_record_errors(record_errors)
        }
    }
}
