//! Transaction markers on their way to partition leaders. The transaction coordinator hands
//! a prepared transaction's markers to [`ClusterMarkers`], which groups the partitions by
//! leader (from the metadata image), writes those this broker leads itself
//! ([`write_local`]) and sends WriteTxnMarkers to the other leaders. A leader writes the
//! control batch and waits, as for acks=all, until the ISR holds it.
//!
//! `__consumer_offsets` partitions (a transaction's offsets, KIP-447) take no control
//! batch: the group coordinator keeps those offsets pending and the marker makes it commit
//! or drop them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, BoxFuture};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ApiKey, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::ResponseError;
use tokio::sync::watch;

use super::{endpoint, Node};
use crate::clock::now_ms;
use crate::controller::metadata::{Image, NO_LEADER};
use crate::coordinator::transactions::TxnPartition;
use crate::coordinator::txn_coordinator::{MarkerWriter, Markers};
use crate::dial::Dialer;
use crate::error::{Error, Result};
use crate::log::batch::ControlType;
use crate::topics::OFFSETS_TOPIC;
use crate::wire::topic_name;

/// How long a leader waits for its ISR to hold a marker (Kafka: the request timeout the
/// coordinator's marker channel uses).
const MARKER_TIMEOUT: Duration = Duration::from_secs(30);

/// Writes one marker on this broker, the leader of `topic`-`index`, and waits until the
/// ISR holds it.
pub async fn write_local(
    node: &Node,
    topic: &str,
    index: i32,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> Result<()> {
    let (t, p) = node.catalog.partition(topic, index)?;
    let place = p.placement();
    if place.leader != node.id() {
        return Err(Error::NotLeaderOrFollower);
    }
    if topic == OFFSETS_TOPIC {
        return node
            .groups
            .complete_txn_offsets(index, producer_id, producer_epoch, commit)
            .await;
    }
    let kind = match commit {
        true => ControlType::Commit,
        false => ControlType::Abort,
    };
    let min_isr = t.effective.min_insync_replicas;
    if (place.isr.len() as i32) < min_isr {
        return Err(Error::NotEnoughReplicas {
            isr: place.isr.len(),
            min: min_isr,
        });
    }
    let offset = p
        .log
        .append_marker(
            producer_id,
            producer_epoch,
            kind,
            coordinator_epoch,
            now_ms(),
            t.effective.flush_each_append,
        )
        .await?;
    super::await_committed(
        &p,
        node.id(),
        place.leader_epoch,
        offset + 1,
        min_isr,
        MARKER_TIMEOUT,
    )
    .await
}

/// The [`MarkerWriter`] of a broker in a cluster (one node included).
pub struct ClusterMarkers {
    node: Node,
    image: watch::Receiver<Arc<Image>>,
}

impl ClusterMarkers {
    pub fn new(node: Node, image: watch::Receiver<Arc<Image>>) -> ClusterMarkers {
        ClusterMarkers { node, image }
    }
}

impl MarkerWriter for ClusterMarkers {
    fn write(&self, m: Markers) -> BoxFuture<'static, Vec<(TxnPartition, ResponseError)>> {
        let node = self.node.clone();
        let image = self.image.borrow().clone();
        Box::pin(async move {
            let mut failed = Vec::new();
            let mut by_leader: BTreeMap<i32, Vec<TxnPartition>> = BTreeMap::new();
            for p in &m.partitions {
                let leader = image
                    .names
                    .get(&p.0)
                    .and_then(|id| image.partition(*id, p.1))
                    .map(|ps| ps.leader);
                match leader {
                    None => failed.push((p.clone(), ResponseError::UnknownTopicOrPartition)),
                    Some(NO_LEADER) => failed.push((p.clone(), ResponseError::NotLeaderOrFollower)),
                    Some(l) => by_leader.entry(l).or_default().push(p.clone()),
                }
            }
            let me = node.id();
            let sends = by_leader.into_iter().map(|(leader, partitions)| {
                let node = node.clone();
                let image = image.clone();
                let m = m.clone();
                async move {
                    if leader == me {
                        let writes = partitions.iter().map(|p| {
                            write_local(
                                &node,
                                &p.0,
                                p.1,
                                m.producer_id,
                                m.producer_epoch,
                                m.commit,
                                m.coordinator_epoch,
                            )
                        });
                        return join_all(writes)
                            .await
                            .into_iter()
                            .zip(partitions)
                            .filter_map(|(r, p)| r.err().map(|e| (p, e.response_error())))
                            .collect::<Vec<_>>();
                    }
                    let Some(addr) = endpoint(&image, leader, &node.config) else {
                        return partitions
                            .into_iter()
                            .map(|p| (p, ResponseError::NotLeaderOrFollower))
                            .collect();
                    };
                    send(&node.dial, &addr, &m, partitions).await
                }
            });
            for f in join_all(sends).await {
                failed.extend(f);
            }
            failed
        })
    }
}

/// Partition indexes by topic, as requests name them.
fn by_topic(partitions: &[TxnPartition]) -> BTreeMap<&str, Vec<i32>> {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for p in partitions {
        topics.entry(&p.0).or_default().push(p.1);
    }
    topics
}

/// WriteTxnMarkers to another leader for `partitions`; answers the partitions that failed.
async fn send(
    dial: &Dialer,
    addr: &str,
    m: &Markers,
    partitions: Vec<TxnPartition>,
) -> Vec<(TxnPartition, ResponseError)> {
    let topics = by_topic(&partitions);
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(m.producer_id.into())
        .with_producer_epoch(m.producer_epoch)
        .with_transaction_result(m.commit)
        .with_coordinator_epoch(m.coordinator_epoch)
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    WritableTxnMarkerTopic::default()
                        .with_name(topic_name(t))
                        .with_partition_indexes(ps)
                })
                .collect(),
        )]);
    let answer: std::result::Result<WriteTxnMarkersResponse, _> = super::peer::call(
        dial,
        addr,
        ApiKey::WriteTxnMarkers,
        1,
        &req,
        MARKER_TIMEOUT + Duration::from_secs(5),
    )
    .await;
    let r = match answer {
        Ok(r) => r,
        Err(e) => return partitions.into_iter().map(|p| (p, e)).collect(),
    };
    let mut failed = Vec::new();
    let mut answered = std::collections::BTreeSet::new();
    for marker in r.markers {
        for t in marker.topics {
            for p in t.partitions {
                let tp = (t.name.to_string(), p.partition_index);
                answered.insert(tp.clone());
                if p.error_code != 0 {
                    let e = ResponseError::try_from_code(p.error_code)
                        .unwrap_or(ResponseError::UnknownServerError);
                    failed.push((tp, e));
                }
            }
        }
    }
    // A partition the leader did not answer for is retried.
    failed.extend(
        partitions
            .into_iter()
            .filter(|p| !answered.contains(p))
            .map(|p| (p, ResponseError::NetworkException)),
    );
    failed
}

/// KIP-890 on another broker, the transaction coordinator of `id`: AddPartitionsToTxn v4
/// with VerifyOnly, or with `add` v5 without it (transaction version 2: the leader adds the
/// partition). The partition's own answer, or the error that kept the coordinator from
/// giving one.
pub async fn verify_remote(
    dial: &Dialer,
    addr: &str,
    id: &str,
    producer_id: i64,
    epoch: i16,
    partitions: &[TxnPartition],
    add: bool,
) -> Vec<std::result::Result<(), ResponseError>> {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
    let topics = by_topic(partitions);
    let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(crate::wire::str_bytes(id).into())
            .with_producer_id(producer_id.into())
            .with_producer_epoch(epoch)
            .with_verify_only(!add)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(topic_name(t))
                            .with_partitions(ps)
                    })
                    .collect(),
            ),
    ]);
    let answer: std::result::Result<AddPartitionsToTxnResponse, _> = super::peer::call(
        dial,
        addr,
        ApiKey::AddPartitionsToTxn,
        // v5: an add is transaction version 2's
        if add { 5 } else { 4 },
        &req,
        Duration::from_secs(10),
    )
    .await;
    let r = match answer {
        Ok(r) if r.error_code == 0 => r,
        Ok(r) => {
            let e = ResponseError::try_from_code(r.error_code)
                .unwrap_or(ResponseError::UnknownServerError);
            return vec![Err(e); partitions.len()];
        }
        Err(e) => return vec![Err(e); partitions.len()],
    };
    let codes: BTreeMap<(&str, i32), i16> = r
        .results_by_transaction
        .iter()
        .flat_map(|t| &t.topic_results)
        .flat_map(|t| {
            t.results_by_partition
                .iter()
                .map(move |p| ((&**t.name, p.partition_index), p.partition_error_code))
        })
        .collect();
    partitions
        .iter()
        .map(|p| match codes.get(&(p.0.as_str(), p.1)) {
            // A partition the coordinator did not answer for: retriable.
            None => Err(ResponseError::NetworkException),
            Some(0) => Ok(()),
            Some(&c) => {
                Err(ResponseError::try_from_code(c).unwrap_or(ResponseError::UnknownServerError))
            }
        })
        .collect()
}
