//! Produce, Fetch and ListOffsets against a real broker process.

mod common;

use std::time::{Duration, Instant};

use common::{batch, batch_with, Broker, Client};
use kafka_protocol::messages::{
    ApiKey, FetchResponse, InitProducerIdRequest, InitProducerIdResponse,
};
use kafka_protocol::ResponseError;

#[test]
fn produce_then_fetch_with_every_acks() {
    let b = Broker::start();
    let mut c = b.client();
    assert_eq!(c.create_topic("t", 2, &[]), 0);
    assert_eq!(c.produce("t", 0, batch(&["a", "b"]), 1), (0, 0));
    assert_eq!(c.produce("t", 0, batch(&["c"]), -1), (0, 2));
    // acks=0: no response; the next request's response is the next frame.
    c.send_only(
        ApiKey::Produce,
        9,
        &Client::produce_request("t", 1, batch(&["z"]), 0),
    );
    let (err, hw, recs) = c.fetch("t", 0, 0);
    assert_eq!((err, hw), (0, 3));
    assert_eq!(
        recs,
        vec![(0, "a".into()), (1, "b".into()), (2, "c".into())]
    );
    // A fetch inside a batch returns the whole batch.
    let (_, _, recs) = c.fetch("t", 0, 1);
    assert_eq!(recs.first().map(|r| r.0), Some(0));
    let (_, hw, recs) = c.fetch("t", 1, 0);
    assert_eq!((hw, recs), (1, vec![(0, "z".into())]));
}

#[test]
fn fetch_waits_for_data_and_is_woken_by_appends() {
    let b = Broker::start();
    let mut c = b.client();
    c.create_topic("w", 1, &[]);
    let mut consumer = b.client();
    let started = Instant::now();
    consumer.send_only(
        ApiKey::Fetch,
        12,
        &Client::fetch_request("w", 0, 0, 20_000, 1),
    );
    std::thread::sleep(Duration::from_millis(200));
    c.produce("w", 0, batch(&["late"]), 1);
    let mut body = consumer.read_frame().unwrap();
    let _ =
        <kafka_protocol::messages::ResponseHeader as kafka_protocol::protocol::Decodable>::decode(
            &mut body, 1,
        );
    let resp =
        <FetchResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 12).unwrap();
    let recs = common::records(resp.responses[0].partitions[0].records.clone().unwrap());
    assert_eq!(recs, vec![(0, "late".into())]);
    // Woken by the append, not by the 20 s timeout.
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn empty_fetch_answers_after_max_wait_with_empty_records() {
    let b = Broker::start();
    let mut c = b.client();
    c.create_topic("e", 1, &[]);
    let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &Client::fetch_request("e", 0, 0, 100, 1));
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.records.as_deref(), Some(&b""[..]));
    let (err, _, _) = c.fetch("e", 0, 5);
    assert_eq!(err, ResponseError::OffsetOutOfRange.code());
}

/// Records per partition of one Fetch of partitions 0..4 of `topic`, all from `offsets`.
fn fetch_counts(
    c: &mut Client,
    topic: &str,
    offsets: [i64; 4],
    max_bytes: i32,
    partition_max: i32,
) -> Vec<usize> {
    use kafka_protocol::messages::fetch_request::FetchPartition;
    let mut req = Client::fetch_request(topic, 0, 0, 0, 0).with_max_bytes(max_bytes);
    req.topics[0].partitions = (0..4)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(offsets[p as usize])
                .with_current_leader_epoch(-1)
                .with_last_fetched_epoch(-1)
                .with_partition_max_bytes(partition_max)
        })
        .collect();
    let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    resp.responses[0]
        .partitions
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0);
            common::records(p.records.clone().unwrap()).len()
        })
        .collect()
}

#[test]
fn fetch_of_many_partitions_keeps_kip74_budgets() {
    let mut b = Broker::start();
    let value = "x".repeat(100);
    let size = batch(&[&value]).len() as i32;
    {
        let mut c = b.client();
        assert_eq!(c.create_topic("m", 4, &[]), 0);
        for p in 0..4 {
            for _ in 0..3 {
                assert_eq!(c.produce("m", p, batch(&[&value]), -1).0, 0);
            }
        }
    }
    // Once from the broker's recent-batch cache, once from storage after a restart.
    for round in 0..2 {
        let mut c = b.client();
        let from0 = [0; 4];
        // Room for everything: every batch of every partition.
        assert_eq!(
            fetch_counts(&mut c, "m", from0, 50 << 20, 1 << 20),
            [3, 3, 3, 3],
            "round {round}"
        );
        // A partition limit below one batch: the first partition still gets one (KIP-74).
        assert_eq!(
            fetch_counts(&mut c, "m", from0, 50 << 20, 1),
            [1, 0, 0, 0],
            "round {round}"
        );
        // ... and when the first partition has nothing new, the first that has does.
        assert_eq!(
            fetch_counts(&mut c, "m", [3, 0, 0, 0], 50 << 20, 1),
            [0, 1, 0, 0],
            "round {round}"
        );
        // A response limit below one batch: one batch in all.
        assert_eq!(
            fetch_counts(&mut c, "m", from0, 1, 1 << 20),
            [1, 0, 0, 0],
            "round {round}"
        );
        // Two batches per partition, four in all: the budget runs out after two partitions.
        assert_eq!(
            fetch_counts(&mut c, "m", from0, 4 * size + 1, 2 * size + 1),
            [2, 2, 0, 0],
            "round {round}"
        );
        // Budget for five batches: the third partition gets what is left of it.
        assert_eq!(
            fetch_counts(&mut c, "m", from0, 5 * size, 2 * size),
            [2, 2, 1, 0],
            "round {round}"
        );
        drop(c);
        if round == 0 {
            b.stop();
            b.restart();
        }
    }
}

#[test]
fn idempotent_producer_dedupes_and_checks_sequences() {
    let b = Broker::start();
    let mut c = b.client();
    c.create_topic("idem", 1, &[]);
    let r: InitProducerIdResponse = c.send(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60000),
    );
    assert_eq!(r.error_code, 0);
    let pid = r.producer_id.0;
    let r2: InitProducerIdResponse = c.send(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None),
    );
    assert_ne!(r2.producer_id.0, pid, "each producer gets its own id");

    let first = batch_with(&["a", "b"], pid, 0, 0, 1);
    assert_eq!(c.produce("idem", 0, first.clone(), -1), (0, 0));
    assert_eq!(
        c.produce("idem", 0, batch_with(&["c"], pid, 0, 2, 1), -1),
        (0, 2)
    );
    // A retry of the first batch gets its original offset and writes nothing.
    assert_eq!(c.produce("idem", 0, first, -1), (0, 0));
    let (code, _) = c.produce("idem", 0, batch_with(&["gap"], pid, 0, 9, 1), -1);
    assert_eq!(code, ResponseError::OutOfOrderSequenceNumber.code());
    let (_, hw, recs) = c.fetch("idem", 0, 0);
    assert_eq!(hw, 3);
    assert_eq!(recs.len(), 3);
}

#[test]
fn list_offsets_earliest_latest_time_and_max() {
    let b = Broker::start();
    let mut c = b.client();
    c.create_topic("lo", 1, &[]);
    c.produce("lo", 0, batch_with(&["a", "b"], -1, -1, -1, 1000), 1);
    c.produce("lo", 0, batch_with(&["c"], -1, -1, -1, 5000), 1);
    assert_eq!(c.list_offset("lo", 0, -2).1, 0);
    assert_eq!(c.list_offset("lo", 0, -1).1, 3);
    assert_eq!(c.list_offset("lo", 0, 1001), (0, 1, 1001));
    assert_eq!(c.list_offset("lo", 0, 2000), (0, 2, 5000));
    assert_eq!(c.list_offset("lo", 0, 9000), (0, -1, -1));
    assert_eq!(c.list_offset("lo", 0, -3), (0, 2, 5000));
    assert_eq!(
        c.list_offset("nope", 0, -1).0,
        ResponseError::UnknownTopicOrPartition.code()
    );
}
