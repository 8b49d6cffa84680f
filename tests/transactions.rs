//! Transactions against the real broker, request by request as a transactional producer
//! and its consumers send them: InitProducerId, AddPartitionsToTxn, transactional Produce,
//! AddOffsetsToTxn, TxnOffsetCommit, EndTxn; read_committed Fetch and ListOffsets; the
//! admin views and metrics; and the errors Kafka gives for requests out of turn, with
//! nothing stored.
//! Real clients (kafka-python, the Java tools) run the same paths in compat-tests/.

mod common;

use bytes::Bytes;
use common::{batch, free_port, http_get, metric_value, name, txn_batch, Broker, Client};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use kafka_protocol::ResponseError;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn txn_id(v: &str) -> TransactionalId {
    TransactionalId(s(v))
}

/// InitProducerId, retried while the id's last transaction completes
/// (CONCURRENT_TRANSACTIONS), as clients retry it.
fn init(c: &mut Client, id: &str) -> (i16, i64, i16) {
    for _ in 0..100 {
        let r: InitProducerIdResponse = c.send(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(txn_id(id)))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id((-1).into())
                .with_producer_epoch(-1),
        );
        if r.error_code != ResponseError::ConcurrentTransactions.code() {
            return (r.error_code, r.producer_id.0, r.producer_epoch);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("InitProducerId for {id} kept answering CONCURRENT_TRANSACTIONS");
}

/// Waits until FindCoordinator for the transactional id answers (the first call creates
/// `__transaction_state`, whose partitions then load).
fn await_txn_coordinator(c: &mut Client, id: &str) {
    for _ in 0..300 {
        let r: FindCoordinatorResponse = c.send(
            ApiKey::FindCoordinator,
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(vec![s(id)]),
        );
        if r.coordinators[0].error_code == 0 && init_probe(c, id) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("no transaction coordinator for {id}");
}

/// Whether the coordinator has loaded: DescribeTransactions answers something other than
/// COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR.
fn init_probe(c: &mut Client, id: &str) -> bool {
    let r: DescribeTransactionsResponse = c.send(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id(id)]),
    );
    let code = r.transaction_states[0].error_code;
    code == 0 || code == ResponseError::TransactionalIdNotFound.code()
}

fn add_partitions(
    c: &mut Client,
    id: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
    ps: &[i32],
) -> Vec<i16> {
    let r: AddPartitionsToTxnResponse = c.send(
        ApiKey::AddPartitionsToTxn,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn_id(id))
            .with_v3_and_below_producer_id(pid.into())
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(name(topic))
                .with_partitions(ps.to_vec())]),
    );
    r.results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| &t.results_by_partition)
        .map(|p| p.partition_error_code)
        .collect()
}

fn end(c: &mut Client, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let r: EndTxnResponse = c.send(
        ApiKey::EndTxn,
        3,
        &EndTxnRequest::default()
            .with_transactional_id(txn_id(id))
            .with_producer_id(pid.into())
            .with_producer_epoch(epoch)
            .with_committed(commit),
    );
    r.error_code
}

fn produce_txn(c: &mut Client, id: &str, topic: &str, records: Bytes) -> (i16, i64) {
    let req =
        Client::produce_request(topic, 0, records, -1).with_transactional_id(Some(txn_id(id)));
    let r: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// A read_committed fetch: (last stable offset, aborted (pid, first offset), values).
fn fetch_committed(c: &mut Client, topic: &str) -> (i64, Vec<(i64, i64)>, Vec<String>) {
    let req = Client::fetch_request(topic, 0, 0, 0, 0).with_isolation_level(1);
    let r: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let aborted = p
        .aborted_transactions
        .as_ref()
        .expect("read_committed gets the aborted list")
        .iter()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    let mut bytes = p.records.clone().unwrap_or_default();
    let mut values = Vec::new();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        for r in set.records {
            if !r.control {
                values.push(String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap());
            }
        }
    }
    (p.last_stable_offset, aborted, values)
}

fn latest(c: &mut Client, topic: &str, isolation: i8) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)])]);
    let r: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 8, &req);
    r.topics[0].partitions[0].offset
}

#[test]
fn committed_and_aborted_transactions_as_read_committed_consumers_see_them() {
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let b = Broker::start_with(&[&format!("metrics.listener={metrics}")]);
    let scrape = || http_get(metrics, "/metrics").1;
    let t0 = [("topic", "t"), ("partition", "0")];
    let txns = |text: &str, state: &str| {
        metric_value(
            text,
            "kafka_coordinator_transaction_transactions",
            &[("state", state)],
        )
    };
    let mut c = b.client();
    c.create_topic("t", 1, &[]);
    await_txn_coordinator(&mut c, "tx");
    let (err, pid, epoch) = init(&mut c, "tx");
    assert_eq!((err, epoch), (0, 0));

    // A transaction left open holds back the last stable offset.
    assert_eq!(add_partitions(&mut c, "tx", pid, epoch, "t", &[0]), vec![0]);
    assert_eq!(
        produce_txn(&mut c, "tx", "t", txn_batch(&["a", "b"], pid, epoch, 0)),
        (0, 0)
    );
    assert_eq!(c.produce("t", 0, batch(&["plain"]), -1), (0, 2));
    let (lso, aborted, values) = fetch_committed(&mut c, "t");
    assert_eq!((lso, aborted, values), (0, vec![], vec![]));
    assert_eq!(
        latest(&mut c, "t", 1),
        0,
        "read_committed LATEST is the LSO"
    );
    assert_eq!(
        latest(&mut c, "t", 0),
        3,
        "read_uncommitted LATEST is the HW"
    );
    // The metrics say so too: the LSO below the HW, one transaction ongoing.
    let m = scrape();
    assert_eq!(
        metric_value(&m, "kafka_topic_partition_last_stable_offset", &t0),
        Some(0.0)
    );
    assert_eq!(
        metric_value(&m, "kafka_topic_partition_current_offset", &t0),
        Some(3.0)
    );
    assert_eq!(txns(&m, "Ongoing"), Some(1.0));

    // Commit: the marker takes offset 3 and everything is stable.
    assert_eq!(end(&mut c, "tx", pid, epoch, true), 0);
    let mut seen = (0, vec![], vec![]);
    for _ in 0..100 {
        seen = fetch_committed(&mut c, "t");
        if seen.0 == 4 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        seen,
        (4, vec![], vec!["a".into(), "b".into(), "plain".into()])
    );
    // The coordinator completes the transaction once the marker is written.
    let mut m = scrape();
    for _ in 0..100 {
        if txns(&m, "CompleteCommit") == Some(1.0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        m = scrape();
    }
    assert_eq!(
        metric_value(&m, "kafka_topic_partition_last_stable_offset", &t0),
        Some(4.0)
    );
    assert_eq!(txns(&m, "Ongoing"), Some(0.0));
    assert_eq!(txns(&m, "CompleteCommit"), Some(1.0));

    // Abort: its records stay in the log, and read_committed is told to drop them.
    let mut added = vec![];
    for _ in 0..100 {
        added = add_partitions(&mut c, "tx", pid, epoch, "t", &[0]);
        if added != vec![ResponseError::ConcurrentTransactions.code()] {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(added, vec![0]);
    assert_eq!(
        produce_txn(&mut c, "tx", "t", txn_batch(&["x"], pid, epoch, 2)),
        (0, 4)
    );
    assert_eq!(end(&mut c, "tx", pid, epoch, false), 0);
    for _ in 0..100 {
        seen = fetch_committed(&mut c, "t");
        if seen.0 == 6 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(seen.0, 6);
    assert_eq!(
        seen.1,
        vec![(pid, 4)],
        "the aborted transaction and where it started"
    );
    let (_, hw, all) = c.fetch("t", 0, 0);
    assert_eq!(hw, 6);
    assert!(
        all.iter().any(|(o, v)| (*o, v.as_str()) == (4, "x")),
        "aborted data is kept"
    );

    // The admin views: the transaction (complete once the coordinator has written that,
    // just after the last marker) and the partition's producer.
    let mut state = String::new();
    for _ in 0..100 {
        let r: DescribeTransactionsResponse = c.send(
            ApiKey::DescribeTransactions,
            0,
            &DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id("tx")]),
        );
        let st = &r.transaction_states[0];
        assert_eq!((st.error_code, st.producer_id.0), (0, pid));
        state = st.transaction_state.to_string();
        if state != "PrepareAbort" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(state, "CompleteAbort");
    let r: ListTransactionsResponse = c.send(
        ApiKey::ListTransactions,
        1,
        &ListTransactionsRequest::default().with_duration_filter(-1),
    );
    assert!(r
        .transaction_states
        .iter()
        .any(|t| t.transactional_id.as_str() == "tx"));
    let r: DescribeProducersResponse = c.send(
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default()
                .with_name(name("t"))
                .with_partition_indexes(vec![0]),
        ]),
    );
    let ps = &r.topics[0].partitions[0];
    assert_eq!(ps.error_code, 0);
    assert_eq!(ps.active_producers.len(), 1);
    assert_eq!(ps.active_producers[0].current_txn_start_offset, -1);

    // A second producer with the same id fences the first.
    let (err, pid2, epoch2) = init(&mut c, "tx");
    assert_eq!((err, pid2, epoch2), (0, pid, epoch + 1));
    assert_eq!(
        add_partitions(&mut c, "tx", pid, epoch, "t", &[0]),
        vec![ResponseError::ProducerFenced.code()]
    );
    assert_eq!(
        end(&mut c, "tx", pid, epoch, true),
        ResponseError::ProducerFenced.code()
    );
}

#[test]
fn requests_out_of_turn_get_kafkas_errors_and_store_nothing() {
    let b = Broker::start_with(&["transaction.max.timeout.ms=60000"]);
    let mut c = b.client();
    c.create_topic("t", 1, &[]);
    await_txn_coordinator(&mut c, "bad");
    // A timeout above transaction.max.timeout.ms.
    let r: InitProducerIdResponse = c.send(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id("bad")))
            .with_transaction_timeout_ms(60_001),
    );
    assert_eq!(
        r.error_code,
        ResponseError::InvalidTransactionTimeout.code()
    );
    // An empty transactional id.
    let r: InitProducerIdResponse = c.send(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id("")))
            .with_transaction_timeout_ms(1000),
    );
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    // Unknown transactional ids.
    assert_eq!(
        end(&mut c, "nobody", 5, 0, true),
        ResponseError::InvalidProducerIdMapping.code()
    );
    assert_eq!(
        add_partitions(&mut c, "nobody", 5, 0, "t", &[0]),
        vec![ResponseError::InvalidProducerIdMapping.code()]
    );
    let (err, pid, epoch) = init(&mut c, "bad");
    assert_eq!(err, 0);
    // EndTxn with no transaction started.
    assert_eq!(
        end(&mut c, "bad", pid, epoch, true),
        ResponseError::InvalidTxnState.code()
    );
    // The wrong producer id, and a stale epoch (v3: PRODUCER_FENCED; v1: the old code).
    assert_eq!(
        add_partitions(&mut c, "bad", pid + 1, epoch, "t", &[0]),
        vec![ResponseError::InvalidProducerIdMapping.code()]
    );
    let r: EndTxnResponse = c.send(
        ApiKey::EndTxn,
        1,
        &EndTxnRequest::default()
            .with_transactional_id(txn_id("bad"))
            .with_producer_id(pid.into())
            .with_producer_epoch(epoch - 1)
            .with_committed(true),
    );
    assert_eq!(r.error_code, ResponseError::InvalidProducerEpoch.code());
    // Unknown topics: that partition fails, the others are not attempted.
    assert_eq!(
        add_partitions(&mut c, "bad", pid, epoch, "missing", &[0]),
        vec![ResponseError::UnknownTopicOrPartition.code()]
    );
    // A transactional write to a partition not in the transaction (KIP-890), and a
    // transactional batch without the producer's transactional id: nothing is stored.
    let (err, _) = produce_txn(&mut c, "bad", "t", txn_batch(&["late"], pid, epoch, 0));
    assert_eq!(err, ResponseError::InvalidTxnState.code());
    let (err, _) = c.produce("t", 0, txn_batch(&["anon"], pid, epoch, 0), -1);
    assert_eq!(err, ResponseError::InvalidRecord.code());
    let (err, _) = produce_txn(&mut c, "bad", "t", batch(&["not txn"]));
    assert_eq!(err, ResponseError::InvalidRecord.code());
    let (_, hw, recs) = c.fetch("t", 0, 0);
    assert_eq!((hw, recs.len()), (0, 0));
    // TxnOffsetCommit naming a member of a group that does not exist is refused.
    let r: TxnOffsetCommitResponse = c.send(
        ApiKey::TxnOffsetCommit,
        3,
        &TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id("bad"))
            .with_group_id(GroupId(s("g")))
            .with_producer_id(pid.into())
            .with_producer_epoch(epoch)
            .with_generation_id(3)
            .with_member_id(s("ghost"))
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(name("t"))
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(1)])]),
    );
    assert_ne!(r.topics[0].partitions[0].error_code, 0);
    // DescribeTransactions of an unknown id.
    let r: DescribeTransactionsResponse = c.send(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id("nobody")]),
    );
    assert_eq!(
        r.transaction_states[0].error_code,
        ResponseError::TransactionalIdNotFound.code()
    );
    // The broker still serves.
    assert_eq!(c.produce("t", 0, batch(&["fine"]), -1), (0, 0));
}

#[test]
fn offsets_in_a_transaction_count_only_once_it_commits() {
    let b = Broker::start();
    let mut c = b.client();
    c.create_topic("in", 1, &[]);
    c.await_group_coordinator();
    await_txn_coordinator(&mut c, "copier");
    let (_, pid, epoch) = init(&mut c, "copier");
    let add_offsets = |c: &mut Client| {
        let r: AddOffsetsToTxnResponse = c.send(
            ApiKey::AddOffsetsToTxn,
            3,
            &AddOffsetsToTxnRequest::default()
                .with_transactional_id(txn_id("copier"))
                .with_producer_id(pid.into())
                .with_producer_epoch(epoch)
                .with_group_id(GroupId(s("copy-group"))),
        );
        r.error_code
    };
    let txn_commit = |c: &mut Client, offset: i64| {
        let r: TxnOffsetCommitResponse = c.send(
            ApiKey::TxnOffsetCommit,
            3,
            &TxnOffsetCommitRequest::default()
                .with_transactional_id(txn_id("copier"))
                .with_group_id(GroupId(s("copy-group")))
                .with_producer_id(pid.into())
                .with_producer_epoch(epoch)
                .with_generation_id(-1)
                .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                    .with_name(name("in"))
                    .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(-1)])]),
        );
        r.topics[0].partitions[0].error_code
    };
    let committed = |c: &mut Client, require_stable: bool| {
        let r: OffsetFetchResponse = c.send(
            ApiKey::OffsetFetch,
            7,
            &OffsetFetchRequest::default()
                .with_group_id(GroupId(s("copy-group")))
                .with_require_stable(require_stable)
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(name("in"))
                    .with_partition_indexes(vec![0])])),
        );
        let p = &r.topics[0].partitions[0];
        (r.error_code.max(p.error_code), p.committed_offset)
    };
    assert_eq!(add_offsets(&mut c), 0);
    assert_eq!(txn_commit(&mut c, 7), 0);
    assert_eq!(
        committed(&mut c, false),
        (0, -1),
        "pending offsets are not committed"
    );
    assert_eq!(
        committed(&mut c, true).0,
        ResponseError::UnstableOffsetCommit.code()
    );
    assert_eq!(end(&mut c, "copier", pid, epoch, false), 0);
    // Aborted: dropped. Then a committed transaction's offset counts.
    let mut now = (1, 1);
    for _ in 0..100 {
        now = committed(&mut c, true);
        if now.0 == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(now, (0, -1));
    // Until the abort completes, the next transaction waits (clients retry 51).
    let mut err = -1;
    for _ in 0..100 {
        err = add_offsets(&mut c);
        if err != ResponseError::ConcurrentTransactions.code() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(err, 0);
    assert_eq!(txn_commit(&mut c, 9), 0);
    assert_eq!(end(&mut c, "copier", pid, epoch, true), 0);
    for _ in 0..100 {
        now = committed(&mut c, true);
        if now == (0, 9) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(now, (0, 9));
}

/// Produce `records` of a transactional producer to partitions `ps` of `topic` in one
/// request; the error code of each partition.
fn produce_txn_to(
    c: &mut Client,
    version: i16,
    id: &str,
    topic: &str,
    ps: &[i32],
    records: Bytes,
) -> Vec<i16> {
    let mut req =
        Client::produce_request(topic, 0, records, -1).with_transactional_id(Some(txn_id(id)));
    let one = req.topic_data[0].partition_data[0].clone();
    req.topic_data[0].partition_data = ps.iter().map(|&p| one.clone().with_index(p)).collect();
    let r: ProduceResponse = c.send(ApiKey::Produce, version, &req);
    let mut out: Vec<(i32, i16)> = r.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.index, p.error_code))
        .collect();
    out.sort();
    assert_eq!(
        out.iter().map(|p| p.0).collect::<Vec<_>>(),
        ps,
        "one answer per partition"
    );
    out.into_iter().map(|p| p.1).collect()
}

/// A transaction's partitions, as DescribeTransactions lists them.
fn txn_partitions(c: &mut Client, id: &str) -> Vec<(String, i32)> {
    let r: DescribeTransactionsResponse = c.send(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id(id)]),
    );
    let mut out: Vec<(String, i32)> = r.transaction_states[0]
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.to_string(), *p)))
        .collect();
    out.sort();
    out
}

/// A Produce request for several partitions of a transaction is verified with the
/// coordinator once, as Kafka does, and each partition still gets its own answer: under
/// transaction version 1 only the partitions the producer added take the batch; under
/// version 2 (Produce v12) the leader adds them all.
#[test]
fn one_request_for_several_partitions_is_verified_partition_by_partition() {
    let b = Broker::start();
    let mut c = b.client();
    c.create_topic("m", 3, &[]);
    await_txn_coordinator(&mut c, "v1");
    // Version 1: partition 1 is added, 0 and 2 are not.
    let (err, pid, epoch) = init(&mut c, "v1");
    assert_eq!(err, 0);
    assert_eq!(add_partitions(&mut c, "v1", pid, epoch, "m", &[1]), vec![0]);
    let codes = produce_txn_to(
        &mut c,
        9,
        "v1",
        "m",
        &[0, 1, 2],
        txn_batch(&["a"], pid, epoch, 0),
    );
    let refused = ResponseError::InvalidTxnState.code();
    assert_eq!(codes, vec![refused, 0, refused]);
    for (p, stored) in [(0, 0), (1, 1), (2, 0)] {
        let (_, hw, _) = c.fetch("m", p, 0);
        assert_eq!(hw, stored, "partition {p}");
    }
    assert_eq!(end(&mut c, "v1", pid, epoch, false), 0);
    // Version 2: one request adds all three partitions to the transaction.
    await_txn_coordinator(&mut c, "v2");
    let (err, pid, epoch) = init(&mut c, "v2");
    assert_eq!(err, 0);
    let codes = produce_txn_to(
        &mut c,
        12,
        "v2",
        "m",
        &[0, 1, 2],
        txn_batch(&["b"], pid, epoch, 0),
    );
    assert_eq!(codes, vec![0, 0, 0]);
    assert_eq!(
        txn_partitions(&mut c, "v2"),
        vec![
            ("m".to_string(), 0),
            ("m".to_string(), 1),
            ("m".to_string(), 2)
        ]
    );
}

/// transaction.partition.verification.enable=false, as in Kafka: a transaction version 1
/// producer's batch for a partition it never added is trusted and opens a transaction the
/// coordinator does not know (a hanging one, which DescribeProducers shows and
/// `kafka-transactions find-hanging` looks for); a version 2 producer's partition is still
/// added to its transaction. With the default (on) the same batch is refused: see
/// `requests_out_of_turn_get_kafkas_errors_and_store_nothing`.
#[test]
fn without_verification_a_late_batch_leaves_a_hanging_transaction() {
    let b = Broker::start_with(&["transaction.partition.verification.enable=false"]);
    let mut c = b.client();
    c.create_topic("h", 2, &[]);
    await_txn_coordinator(&mut c, "old");
    let (err, pid, epoch) = init(&mut c, "old");
    assert_eq!(err, 0);
    let codes = produce_txn_to(
        &mut c,
        9,
        "old",
        "h",
        &[0],
        txn_batch(&["late"], pid, epoch, 0),
    );
    assert_eq!(codes, vec![0], "trusted without verification");
    assert_eq!(
        txn_partitions(&mut c, "old"),
        vec![],
        "the coordinator does not know it"
    );
    let open: Vec<(i64, i64)> = producers_of(&mut c, "h", 0)
        .into_iter()
        .map(|p| (p.0, p.2))
        .collect();
    assert_eq!(open, vec![(pid, 0)], "open in the log");
    assert_eq!(latest(&mut c, "h", 1), 0, "it holds the last stable offset");
    // Transaction version 2 (Produce v12): added by the leader all the same.
    await_txn_coordinator(&mut c, "new");
    let (err, pid2, epoch2) = init(&mut c, "new");
    assert_eq!(err, 0);
    let codes = produce_txn_to(
        &mut c,
        12,
        "new",
        "h",
        &[1],
        txn_batch(&["b"], pid2, epoch2, 0),
    );
    assert_eq!(codes, vec![0]);
    assert_eq!(txn_partitions(&mut c, "new"), vec![("h".to_string(), 1)]);
}

/// DescribeTransactions of one id: (error code, state).
fn txn_state(c: &mut Client, id: &str) -> (i16, String) {
    let r: DescribeTransactionsResponse = c.send(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id(id)]),
    );
    let t = &r.transaction_states[0];
    (t.error_code, t.transaction_state.to_string())
}

/// transactional.id.expiration.ms: an id unused that long with no transaction in flight is
/// removed, for good (a restart does not bring it back), and its next InitProducerId starts
/// afresh; an id with a transaction open stays.
#[test]
fn an_idle_transactional_id_expires_and_an_open_one_stays() {
    let mut b = Broker::start_with(&[
        "transactional.id.expiration.ms=1000",
        "transaction.remove.expired.transaction.cleanup.interval.ms=100",
    ]);
    let mut c = b.client();
    c.create_topic("x", 1, &[]);
    await_txn_coordinator(&mut c, "idle");
    await_txn_coordinator(&mut c, "busy");
    let (err, idle_pid, _) = init(&mut c, "idle");
    assert_eq!(err, 0);
    let (err, busy_pid, busy_epoch) = init(&mut c, "busy");
    assert_eq!(err, 0);
    assert_eq!(
        add_partitions(&mut c, "busy", busy_pid, busy_epoch, "x", &[0]),
        vec![0]
    );
    let gone = ResponseError::TransactionalIdNotFound.code();
    let mut now = txn_state(&mut c, "idle");
    for _ in 0..600 {
        if now.0 == gone {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        now = txn_state(&mut c, "idle");
    }
    assert_eq!(now.0, gone, "the idle id was not removed: {now:?}");
    assert_eq!(txn_state(&mut c, "busy"), (0, "Ongoing".to_string()));
    assert_eq!(b.stop(), Some(0));
    b.restart();
    let mut c = b.client();
    await_txn_coordinator(&mut c, "idle");
    assert_eq!(txn_state(&mut c, "idle").0, gone, "removed for good");
    assert_eq!(txn_state(&mut c, "busy"), (0, "Ongoing".to_string()));
    let (err, pid, epoch) = init(&mut c, "idle");
    assert_eq!(err, 0);
    assert_ne!(pid, idle_pid, "a fresh producer id");
    assert_eq!(epoch, 0);
}

/// DescribeProducers of one partition: (producer id, last timestamp, open transaction's
/// first offset).
fn producers_of(c: &mut Client, topic: &str, p: i32) -> Vec<(i64, i64, i64)> {
    let r: DescribeProducersResponse = c.send(
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default()
                .with_name(name(topic))
                .with_partition_indexes(vec![p]),
        ]),
    );
    r.topics[0].partitions[0]
        .active_producers
        .iter()
        .map(|s| {
            (
                s.producer_id.0,
                s.last_timestamp,
                s.current_txn_start_offset,
            )
        })
        .collect()
}

/// producer.id.expiration.ms: a partition forgets a producer whose last batch is that old
/// (by the batch's timestamp), in memory and in storage, unless it has a transaction open
/// there; the forgotten producer's next batch is taken like a new producer's.
#[test]
fn a_partition_forgets_an_idle_producer_but_not_one_in_a_transaction() {
    let mut b = Broker::start_with(&[
        "producer.id.expiration.ms=5000",
        "producer.id.expiration.check.interval.ms=100",
    ]);
    let mut c = b.client();
    c.create_topic("e", 1, &[]);
    await_txn_coordinator(&mut c, "open");
    let (err, tpid, tepoch) = init(&mut c, "open");
    assert_eq!(err, 0);
    assert_eq!(
        add_partitions(&mut c, "open", tpid, tepoch, "e", &[0]),
        vec![0]
    );
    // Its batch's timestamp is long past: only the open transaction keeps it.
    let (err, _) = produce_txn(&mut c, "open", "e", txn_batch(&["t"], tpid, tepoch, 0));
    assert_eq!(err, 0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let idem = common::batch_with(&["a"], 4242, 0, 0, now);
    assert_eq!(c.produce("e", 0, idem.clone(), -1), (0, 1));
    let seen = producers_of(&mut c, "e", 0);
    assert!(
        seen.contains(&(4242, now, -1)),
        "the last timestamp is the batch's: {seen:?}"
    );
    assert_eq!(c.produce("e", 0, idem.clone(), -1), (0, 1), "a duplicate");
    let mut seen = producers_of(&mut c, "e", 0);
    for _ in 0..600 {
        if !seen.iter().any(|p| p.0 == 4242) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        seen = producers_of(&mut c, "e", 0);
    }
    assert_eq!(
        seen.iter().map(|p| (p.0, p.2)).collect::<Vec<_>>(),
        vec![(tpid, 0)],
        "only the producer in a transaction is left"
    );
    assert_eq!(b.stop(), Some(0));
    b.restart();
    let mut c = b.client();
    let seen = producers_of(&mut c, "e", 0);
    assert_eq!(
        seen.iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![tpid],
        "forgotten in storage too"
    );
    // Forgotten: the same batch again is new data.
    assert_eq!(c.produce("e", 0, idem, -1), (0, 2));
}
