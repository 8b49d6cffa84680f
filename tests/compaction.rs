//! Log compaction on the real broker: `cleanup.policy=compact` topics keep the latest
//! record of each key at its offset, tombstones go after `delete.retention.ms`, keyless
//! records are refused, and a cleaned log survives kill -9.

mod common;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::{alter_broker, describe_key, Broker, BROKER, DELETE, SET, TOPIC};
use kafka_protocol::messages::{ApiKey, FetchResponse, ProduceResponse};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// One batch of (key, value) records, compressed with `compression`.
fn keyed(kvs: &[(Option<&str>, Option<&str>)], compression: Compression) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let records: Vec<Record> = kvs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: now,
            key: k.map(|k| Bytes::from(k.to_string())),
            value: v.map(|v| Bytes::from(v.to_string())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    buf.freeze()
}

/// Produces one batch. Each batch is to start a new active segment (`segment.ms=1`), and
/// a segment rolls only once a millisecond has passed, so wait a little first.
fn produce(c: &mut common::Client, topic: &str, records: Bytes) -> i16 {
    std::thread::sleep(Duration::from_millis(5));
    let req = common::Client::produce_request(topic, 0, records, -1);
    let r: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    r.responses[0].partition_responses[0].error_code
}

/// Every record from offset 0: (offset, key, value).
fn read_all(c: &mut common::Client, topic: &str) -> Vec<(i64, String, Option<String>)> {
    let req = common::Client::fetch_request(topic, 0, 0, 0, 0);
    let r: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let mut bytes = p.records.clone().unwrap_or_default();
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        for r in set.records {
            let s = |b: Bytes| String::from_utf8(b.to_vec()).unwrap();
            out.push((r.offset, r.key.map(s).unwrap_or_default(), r.value.map(s)));
        }
    }
    out
}

/// Reads until `done` holds (the cleaner runs in the background), for at most a minute.
fn await_log(
    c: &mut common::Client,
    topic: &str,
    done: impl Fn(&[(i64, String, Option<String>)]) -> bool,
) -> Vec<(i64, String, Option<String>)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = read_all(c, topic);
        if done(&got) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "the log was not cleaned: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_compacted_topic_keeps_the_latest_value_of_each_key() {
    let mut b = Broker::start_with(&["log.cleaner.backoff.ms=50"]);
    let mut c = b.client();
    let topic = "latest";
    // segment.ms=1: each batch appended starts a new active segment, so everything but
    // the newest batch is cleanable at once.
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "1"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "0"),
    ];
    assert_eq!(c.create_topic(topic, 1, &configs), 0);

    // Kafka refuses a record without a key on a compacted topic: INVALID_RECORD.
    // Produce v8+ names the records at fault (librdkafka fails just those, 0011).
    let keyless = keyed(
        &[(Some("k1"), Some("x")), (None, Some("y"))],
        Compression::None,
    );
    let req = common::Client::produce_request(topic, 0, keyless, -1);
    let r: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 87);
    let faults: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(faults, vec![1]);

    // Offsets 0-11: three rounds over four keys, in every codec; then k0 deleted (12) and
    // a last value of k1 (13), which stays in the active segment.
    let codecs = [Compression::None, Compression::Gzip, Compression::Zstd];
    for (round, codec) in codecs.into_iter().enumerate() {
        let values: Vec<String> = (0..4).map(|k| format!("v{round}-k{k}")).collect();
        let kvs: Vec<(Option<&str>, Option<&str>)> = ["k0", "k1", "k2", "k3"]
            .iter()
            .zip(&values)
            .map(|(k, v)| (Some(*k), Some(v.as_str())))
            .collect();
        assert_eq!(produce(&mut c, topic, keyed(&kvs, codec)), 0);
    }
    assert_eq!(
        produce(
            &mut c,
            topic,
            keyed(&[(Some("k0"), None)], Compression::Lz4)
        ),
        0
    );
    assert_eq!(
        produce(
            &mut c,
            topic,
            keyed(&[(Some("k1"), Some("last"))], Compression::Snappy)
        ),
        0
    );

    let s = |v: &str| Some(v.to_string());
    // The tombstone is stamped by the first pass and removed by a later one
    // (delete.retention.ms=0), once its batch is not the active segment.
    let expected = vec![
        (9, "k1".to_string(), s("v2-k1")),
        (10, "k2".to_string(), s("v2-k2")),
        (11, "k3".to_string(), s("v2-k3")),
        (13, "k1".to_string(), s("last")),
    ];
    let got = await_log(&mut c, topic, |l| l.len() == expected.len());
    assert_eq!(got, expected);

    // A consumer at a removed offset gets the next one kept.
    let req = common::Client::fetch_request(topic, 0, 3, 0, 0);
    let r: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    let first = common::records(r.responses[0].partitions[0].records.clone().unwrap());
    assert_eq!(first[0].0, 9);

    // The cleaned log is what storage holds: kill -9 and restart change nothing, and the
    // next offset is still 14.
    b.kill9();
    b.restart();
    let mut c = b.client();
    assert_eq!(read_all(&mut c, topic), expected);
    let req = common::Client::produce_request(
        topic,
        0,
        keyed(&[(Some("k2"), Some("n"))], Compression::None),
        -1,
    );
    let r: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 14);
}

#[test]
fn a_delete_policy_topic_is_never_compacted_and_takes_keyless_records() {
    let b = Broker::start_with(&["log.cleaner.backoff.ms=50"]);
    let mut c = b.client();
    let topic = "plain";
    assert_eq!(c.create_topic(topic, 1, &[("segment.ms", "1")]), 0);
    for _ in 0..3 {
        let kvs = [(Some("k"), Some("v")), (None, Some("n"))];
        assert_eq!(produce(&mut c, topic, keyed(&kvs, Compression::None)), 0);
    }
    // Compaction of a compacted topic in the same broker shows the cleaner has run.
    let compacted = "compacted";
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "1"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ];
    assert_eq!(c.create_topic(compacted, 1, &configs), 0);
    for v in ["1", "2", "3"] {
        assert_eq!(
            produce(
                &mut c,
                compacted,
                keyed(&[(Some("k"), Some(v))], Compression::None)
            ),
            0
        );
    }
    await_log(&mut c, compacted, |l| l.len() == 2);
    assert_eq!(read_all(&mut c, topic).len(), 6);
}

#[test]
fn a_bad_cleaner_setting_stops_start_up_with_the_key_named() {
    for (key, value) in [
        ("log.cleanup.policy", "shred"),
        ("log.cleaner.min.cleanable.ratio", "1.5"),
        ("log.cleaner.threads", "-1"),
        ("log.cleaner.io.max.bytes.per.second", "0"),
        ("log.cleaner.io.max.bytes.per.second", "fast"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args([
                "--override",
                &format!("{key}={value}"),
                "--override",
                "log.dirs=/nonexistent-cairn",
            ])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{key}={value} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key) && err.contains(value), "{err}");
    }
}

/// Three cleaner threads under an I/O limit clean six topics, each twice: a partition a
/// thread has cleaned is free for the next pass (of any thread).
#[test]
fn several_cleaner_threads_clean_every_partition_in_turn() {
    let b = Broker::start_with(&[
        "log.cleaner.backoff.ms=50",
        "log.cleaner.threads=3",
        "log.cleaner.io.max.bytes.per.second=100000",
    ]);
    let mut c = b.client();
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "1"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ];
    let topics: Vec<String> = (0..6).map(|t| format!("threads-{t}")).collect();
    for t in &topics {
        assert_eq!(c.create_topic(t, 1, &configs), 0);
    }
    for rounds in [0..3, 3..6] {
        for round in rounds.clone() {
            for t in &topics {
                let values: Vec<String> = (0..4).map(|k| format!("{t}-r{round}-k{k}")).collect();
                let kvs: Vec<(Option<&str>, Option<&str>)> = ["k0", "k1", "k2", "k3"]
                    .iter()
                    .zip(&values)
                    .map(|(k, v)| (Some(*k), Some(v.as_str())))
                    .collect();
                assert_eq!(produce(&mut c, t, keyed(&kvs, Compression::None)), 0);
            }
        }
        // Then one more batch each, which stays in the active segment (never cleaned, so
        // the last round's k0 stays too).
        for t in &topics {
            let kvs = [(Some("k0"), Some("tail"))];
            assert_eq!(produce(&mut c, t, keyed(&kvs, Compression::None)), 0);
        }
        let last = rounds.end - 1;
        for t in &topics {
            let got = await_log(&mut c, t, |l| l.len() == 5);
            let values: Vec<String> = got.iter().map(|r| r.2.clone().unwrap()).collect();
            let want = [
                format!("{t}-r{last}-k0"),
                format!("{t}-r{last}-k1"),
                format!("{t}-r{last}-k2"),
                format!("{t}-r{last}-k3"),
                "tail".to_string(),
            ];
            assert_eq!(values, want, "{t}");
        }
    }
}

/// `kafka-configs --entity-type brokers --alter`: the topics' defaults (here
/// `log.cleanup.policy`) and the cleaner's settings change on a running broker, for the
/// cluster (`--entity-default`) or one broker, persist across a restart, and other keys or
/// bad values are refused with the key named.
#[test]
fn the_cleanup_policy_default_and_the_cleaner_settings_change_at_run_time() {
    let mut b = Broker::start_with(&["node.id=1", "log.cleaner.backoff.ms=50"]);
    let mut c = b.client();
    let topic = "by-default";
    assert_eq!(
        c.create_topic(
            topic,
            1,
            &[("segment.ms", "1"), ("min.cleanable.dirty.ratio", "0.01")]
        ),
        0
    );
    let keyless = || keyed(&[(None, Some("n"))], Compression::None);
    assert_eq!(produce(&mut c, topic, keyless()), 0, "delete policy: taken");

    // The cluster's default: the topic, with no cleanup.policy of its own, is compacted.
    let set = [("log.cleanup.policy", SET, Some("compact"))];
    assert_eq!(alter_broker(&mut c, "", &set).0, 0);
    assert_eq!(
        describe_key(&mut c, TOPIC, topic, "cleanup.policy"),
        Some(("compact".into(), 3, false)),
        "DYNAMIC_DEFAULT_BROKER_CONFIG"
    );
    assert_eq!(
        describe_key(&mut c, BROKER, "", "log.cleanup.policy"),
        Some(("compact".into(), 3, false))
    );
    assert_eq!(
        produce(&mut c, topic, keyless()),
        87,
        "compact: INVALID_RECORD"
    );

    // This broker's own: two cleaner threads, which then clean the topic.
    let threads = [("log.cleaner.threads", SET, Some("2"))];
    assert_eq!(alter_broker(&mut c, "1", &threads).0, 0);
    assert_eq!(
        describe_key(&mut c, BROKER, "1", "log.cleaner.threads"),
        Some(("2".into(), 2, false)),
        "DYNAMIC_BROKER_CONFIG"
    );
    for v in ["1", "2", "3"] {
        let kvs = [(Some("k"), Some(v))];
        assert_eq!(produce(&mut c, topic, keyed(&kvs, Compression::None)), 0);
    }
    let kvs = [(Some("tail"), Some("t"))];
    assert_eq!(produce(&mut c, topic, keyed(&kvs, Compression::None)), 0);
    let got = await_log(&mut c, topic, |l| {
        !l.iter()
            .any(|r| r.2.as_deref() == Some("1") || r.2.as_deref() == Some("2"))
    });
    let values: Vec<Option<String>> = got.into_iter().map(|r| r.2).collect();
    assert_eq!(values, [Some("3".into()), Some("t".into())], "cleaned");

    // Refused, with the key named: a static key, a bad value, too many threads at once,
    // another broker's configs.
    let (e, m) = alter_broker(&mut c, "", &[("num.partitions", SET, Some("3"))]);
    assert_eq!(e, 42, "INVALID_REQUEST");
    assert!(m.unwrap().contains("num.partitions"));
    let (e, m) = alter_broker(&mut c, "1", &[("log.cleaner.threads", SET, Some("zero"))]);
    assert_eq!(e, 40, "INVALID_CONFIG");
    assert!(m.unwrap().contains("log.cleaner.threads"));
    let (e, _) = alter_broker(&mut c, "1", &[("log.cleaner.threads", SET, Some("5"))]);
    assert_eq!(e, 40, "more than double");
    let (e, _) = alter_broker(&mut c, "7", &threads);
    assert_eq!(e, 42, "not this broker");
    assert_eq!(
        describe_key(&mut c, BROKER, "1", "num.partitions").map(|d| d.2),
        Some(true),
        "static keys are read-only"
    );
    // Deleting a key that is not set does nothing, as in Kafka (kafka-reassign-partitions
    // clears its throttles so).
    let unset = [("leader.replication.throttled.rate", DELETE, None)];
    assert_eq!(alter_broker(&mut c, "1", &unset).0, 0);

    // Kept across a restart (the cluster metadata holds them).
    b.stop();
    b.restart();
    let mut c = b.client();
    assert_eq!(
        describe_key(&mut c, TOPIC, topic, "cleanup.policy"),
        Some(("compact".into(), 3, false))
    );
    assert_eq!(produce(&mut c, topic, keyless()), 87);

    // Deleted: the static default again.
    let delete = [("log.cleanup.policy", DELETE, None)];
    assert_eq!(alter_broker(&mut c, "", &delete).0, 0);
    assert_eq!(
        describe_key(&mut c, TOPIC, topic, "cleanup.policy"),
        Some(("delete".into(), 5, false)),
        "DEFAULT_CONFIG"
    );
    assert_eq!(describe_key(&mut c, BROKER, "", "log.cleanup.policy"), None);
    assert_eq!(produce(&mut c, topic, keyless()), 0);
}
