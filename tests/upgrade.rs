//! Upgrades: a data dir written by an earlier release starts under this one with its topics
//! (same ids, partitions and configs), records, committed offsets and consumer groups.
//!
//! Each fixture was written with `write_fixture` below by the release it is named after:
//!
//! - `single-node-0.1.tar.gz`, commit 24d4b6e: topics and groups in the node's own column
//!   families, before the metadata quorum served a single node.
//! - `single-node-0.2.tar.gz`, commit cbd4475: a single node as a metadata quorum of one
//!   (its Raft log in `__cluster_metadata`), groups in `__consumer_offsets`.
//!
//! ```sh
//! CAIRN_FIXTURE_DIR=/tmp/fx cargo test --release --test upgrade write_fixture -- --ignored
//! tar -C /tmp/fx -czf tests/fixtures/single-node-0.2.tar.gz .
//! ```
//!
//! Keep the fixtures as they are: they stand for data users already have on disk. A release
//! that changes the layout adds a fixture of its own and keeps every test here passing.

mod common;

use std::path::Path;
use std::process::Command;

use common::{batch, name, Broker, Client};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, MetadataRequest,
    MetadataResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse,
};
use kafka_protocol::protocol::StrBytes;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// (name, partitions, records per partition)
const TOPICS: &[(&str, i32, usize)] = &[("orders", 3, 5), ("audit.log", 1, 2)];
const COMMITTED: &[(i32, i64)] = &[(0, 2), (1, 3), (2, 5)];

fn value(topic: &str, partition: i32, i: usize) -> String {
    format!("{topic}-{partition}-{i}")
}

fn topic_ids(c: &mut Client) -> Vec<(String, uuid::Uuid, usize)> {
    let m: MetadataResponse = c.send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    let mut out: Vec<(String, uuid::Uuid, usize)> = m
        .topics
        .iter()
        .filter(|t| !t.is_internal)
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.topic_id,
                t.partitions.len(),
            )
        })
        .collect();
    out.sort();
    out
}

fn heartbeat(
    c: &mut Client,
    epoch: i32,
    owned: Option<Vec<TopicPartitions>>,
) -> ConsumerGroupHeartbeatResponse {
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("g-848")))
        .with_member_id(s("member-848"))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(60_000)
        .with_subscribed_topic_names((epoch == 0).then(|| vec![name("orders")]))
        .with_topic_partitions(owned);
    c.send(ApiKey::ConsumerGroupHeartbeat, 1, &req)
}

fn owned(r: &ConsumerGroupHeartbeatResponse) -> Vec<TopicPartitions> {
    r.assignment
        .as_ref()
        .expect("an assignment")
        .topic_partitions
        .iter()
        .map(|t| {
            TopicPartitions::default()
                .with_topic_id(t.topic_id)
                .with_partitions(t.partitions.clone())
        })
        .collect()
}

/// Writes the fixture's data dir with the broker built from this tree (see the top).
#[test]
#[ignore = "writes a fixture: run by hand, as the module doc says"]
fn write_fixture() {
    let dir = std::env::var("CAIRN_FIXTURE_DIR").expect("CAIRN_FIXTURE_DIR");
    let dir = Path::new(&dir);
    let mut b = Broker::start_in(&dir.join("data"), &[]);
    let mut c = b.client();
    c.await_group_coordinator();
    for (topic, partitions, n) in TOPICS {
        assert_eq!(
            c.create_topic(topic, *partitions, &[("retention.ms", "123456789")]),
            0
        );
        for p in 0..*partitions {
            let values: Vec<String> = (0..*n).map(|i| value(topic, p, i)).collect();
            let refs: Vec<&str> = values.iter().map(String::as_str).collect();
            assert_eq!(c.produce(topic, p, batch(&refs), -1).0, 0);
        }
    }
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("g-classic")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name("orders"))
            .with_partitions(
                COMMITTED
                    .iter()
                    .map(|(p, o)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(*o)
                            .with_committed_leader_epoch(-1)
                            .with_committed_metadata(Some(s("fixture")))
                    })
                    .collect(),
            )]);
    let r: OffsetCommitResponse = c.send(ApiKey::OffsetCommit, 9, &commit);
    assert!(r.topics[0].partitions.iter().all(|p| p.error_code == 0));
    let joined = heartbeat(&mut c, 0, None);
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    let steady = heartbeat(&mut c, joined.member_epoch, Some(owned(&joined)));
    assert_eq!(steady.error_code, 0);
    let ids = topic_ids(&mut c);
    assert_eq!(b.stop(), Some(0));
    let expected: String = ids
        .iter()
        .map(|(n, id, p)| format!("{n} {id} {p} {}\n", joined.member_epoch))
        .collect();
    std::fs::write(dir.join("expected.txt"), expected).unwrap();
}

#[test]
fn a_single_node_data_dir_of_release_0_1_keeps_topics_records_offsets_and_groups() {
    starts_with_everything_kept("tests/fixtures/single-node-0.1.tar.gz");
}

#[test]
fn a_single_node_data_dir_of_release_0_2_keeps_topics_records_offsets_and_groups() {
    starts_with_everything_kept("tests/fixtures/single-node-0.2.tar.gz");
}

fn starts_with_everything_kept(fixture: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(fixture);
    let untar = Command::new("tar")
        .arg("-C")
        .arg(tmp.path())
        .arg("-xzf")
        .arg(&fixture)
        .status()
        .expect("tar");
    assert!(untar.success(), "cannot unpack {}", fixture.display());
    let expected = std::fs::read_to_string(tmp.path().join("expected.txt")).unwrap();
    let expected: Vec<(String, uuid::Uuid, usize)> = expected
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    let epoch: i32 = std::fs::read_to_string(tmp.path().join("expected.txt"))
        .unwrap()
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(3))
        .and_then(|e| e.parse().ok())
        .expect("the member epoch");

    let mut b = Broker::start_in(&tmp.path().join("data"), &[]);
    everything_kept(&b, &expected, epoch);
    // Started again: what the first start moved to the new layout is read back from it (a
    // coordinator rebuilds its state from __consumer_offsets alone).
    b.stop();
    b.restart();
    everything_kept(&b, &expected, epoch);
}

fn everything_kept(b: &Broker, expected: &[(String, uuid::Uuid, usize)], epoch: i32) {
    let mut c = b.client();
    c.await_group_coordinator();

    // Topics: the same names, ids and partition counts.
    assert_eq!(topic_ids(&mut c), expected);

    // Records: every one, at its offset.
    for (topic, partitions, n) in TOPICS {
        for p in 0..*partitions {
            let (err, hw, recs) = c.fetch(topic, p, 0);
            assert_eq!((err, hw), (0, *n as i64), "{topic}-{p}");
            let want: Vec<(i64, String)> =
                (0..*n).map(|i| (i as i64, value(topic, p, i))).collect();
            assert_eq!(recs, want, "{topic}-{p}");
        }
    }

    // Committed offsets of the classic group.
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s("g-classic")))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(name("orders"))
            .with_partition_indexes(vec![0, 1, 2])]));
    let r: OffsetFetchResponse = c.send(ApiKey::OffsetFetch, 7, &req);
    assert_eq!(r.error_code, 0);
    let got: Vec<(i32, i64)> = r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset))
        .collect();
    assert_eq!(got, COMMITTED);

    // The KIP-848 group and its member, at the epoch it had.
    let d: ConsumerGroupDescribeResponse = c.send(
        ApiKey::ConsumerGroupDescribe,
        0,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("g-848"))]),
    );
    let g = &d.groups[0];
    assert_eq!(
        (g.error_code, g.group_epoch),
        (0, epoch),
        "{:?}",
        g.error_message
    );
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.members[0].member_id.as_str(), "member-848");
    assert_eq!(g.members[0].member_epoch, epoch);
    assert_eq!(
        g.members[0].assignment.topic_partitions[0].partitions.len(),
        3
    );
}
