//! A three-node cluster of real `cairn` processes (combined broker and controller, as
//! compat-tests/run-all.sh starts for its cluster suites), driven at the protocol level
//! where a client library would hide what is checked.

mod common;

use std::time::{Duration, Instant};

use common::{batch, name, Broker, Client};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FetchResponse, MetadataRequest,
    MetadataResponse, ProduceResponse,
};

const NODES: [i32; 3] = [1, 2, 3];

struct Cluster {
    nodes: Vec<Broker>,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let ports: Vec<u16> = NODES.iter().map(|_| common::free_port()).collect();
        let ctrl: Vec<u16> = NODES.iter().map(|_| common::free_port()).collect();
        let voters: Vec<String> = NODES
            .iter()
            .zip(&ctrl)
            .map(|(i, p)| format!("{i}@127.0.0.1:{p}"))
            .collect();
        let voters = format!("controller.quorum.voters={}", voters.join(","));
        let mut nodes: Vec<Broker> = NODES
            .iter()
            .enumerate()
            .map(|(k, i)| {
                let (port, cport) = (ports[k], ctrl[k]);
                let node = format!("node.id={i}");
                let listeners = format!(
                    "listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"
                );
                let advertised = format!("advertised.listeners=PLAINTEXT://127.0.0.1:{port}");
                Broker::launch_in(
                    &tmp.path().join(format!("data-{i}")),
                    port,
                    &[
                        &node,
                        "process.roles=broker,controller",
                        &voters,
                        "controller.listener.names=CONTROLLER",
                        &listeners,
                        &advertised,
                    ],
                )
            })
            .collect();
        for n in &mut nodes {
            n.await_listening();
        }
        Cluster { nodes, _tmp: tmp }
    }

    fn node(&self, id: i32) -> &Broker {
        &self.nodes[(id - 1) as usize]
    }
}

fn metadata(c: &mut Client, topic: &str) -> MetadataResponse {
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name(topic)))
    ]));
    c.send(ApiKey::Metadata, 12, &req)
}

/// Each partition's (leader, leader epoch), once every node's metadata names a leader for
/// each of them and all nodes agree.
fn await_leaders(cluster: &Cluster, topic: &str, partitions: usize) -> Vec<(i32, i32)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let views: Vec<Vec<(i32, i32)>> = NODES
            .iter()
            .map(|&i| {
                let m = metadata(&mut cluster.node(i).client(), topic);
                let mut parts: Vec<(i32, i32, i32)> = m
                    .topics
                    .iter()
                    .filter(|t| t.error_code == 0)
                    .flat_map(|t| &t.partitions)
                    .map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch))
                    .collect();
                parts.sort();
                parts.iter().map(|p| (p.1, p.2)).collect()
            })
            .collect();
        let settled = views[0].len() == partitions
            && views[0].iter().all(|l| l.0 > 0)
            && views.iter().all(|v| *v == views[0]);
        if settled {
            return views[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "the cluster did not settle the leaders of {topic}: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER names its leader and that leader's
/// epoch (CurrentLeader), and the answer carries the leader's endpoint (NodeEndpoints), in
/// Produce from v10 and Fetch from v16. Older versions have no such fields and still
/// answer NOT_LEADER_OR_FOLLOWER.
#[test]
fn not_leader_answers_name_the_current_leader() {
    let cluster = Cluster::start();
    let topic = "hinted";
    let mut admin = cluster.node(1).client();
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(3)
            .with_replication_factor(1)]);
    let created: CreateTopicsResponse = admin.send(ApiKey::CreateTopics, 7, &create);
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    let leaders = await_leaders(&cluster, topic, 3);
    let topic_id = metadata(&mut admin, topic).topics[0].topic_id;

    for (index, &(leader, epoch)) in leaders.iter().enumerate() {
        let index = index as i32;
        let leader_port = cluster.node(leader).addr.port() as i32;
        for asked in NODES.into_iter().filter(|&n| n != leader) {
            let mut c = cluster.node(asked).client();
            let what = format!("partition {index} (leader {leader}) asked of node {asked}");

            let req = Client::produce_request(topic, index, batch(&["v"]), -1);
            let r: ProduceResponse = c.send(ApiKey::Produce, 12, &req);
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(p.error_code, 6, "Produce v12, {what}");
            assert_eq!(
                (p.current_leader.leader_id.0, p.current_leader.leader_epoch),
                (leader, epoch),
                "Produce v12 CurrentLeader, {what}"
            );
            let ends: Vec<(i32, i32)> = r
                .node_endpoints
                .iter()
                .map(|e| (e.node_id.0, e.port))
                .collect();
            assert_eq!(
                ends,
                vec![(leader, leader_port)],
                "Produce v12 NodeEndpoints, {what}"
            );

            let r: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
            assert_eq!(
                r.responses[0].partition_responses[0].error_code, 6,
                "Produce v9, {what}"
            );

            let mut req = Client::fetch_request(topic, index, 0, 0, 0);
            req.topics[0].topic_id = topic_id;
            let r: FetchResponse = c.send(ApiKey::Fetch, 16, &req);
            let p = &r.responses[0].partitions[0];
            assert_eq!(p.error_code, 6, "Fetch v16, {what}");
            assert_eq!(
                (p.current_leader.leader_id.0, p.current_leader.leader_epoch),
                (leader, epoch),
                "Fetch v16 CurrentLeader, {what}"
            );
            let ends: Vec<(i32, i32)> = r
                .node_endpoints
                .iter()
                .map(|e| (e.node_id.0, e.port))
                .collect();
            assert_eq!(
                ends,
                vec![(leader, leader_port)],
                "Fetch v16 NodeEndpoints, {what}"
            );

            let r: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
            assert_eq!(
                r.responses[0].partitions[0].error_code, 6,
                "Fetch v12, {what}"
            );
        }
    }

    // The leader itself takes the produce: no hint where there is no error.
    let (index, leader) = (0, leaders[0].0);
    let mut c = cluster.node(leader).client();
    let req = Client::produce_request(topic, index, batch(&["v"]), -1);
    let r: ProduceResponse = c.send(ApiKey::Produce, 12, &req);
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "{r:?}");
    assert_eq!(p.current_leader.leader_id.0, -1);
    assert!(r.node_endpoints.is_empty());
}

/// (leader, ISR) of partition 0 of `topic` as node `asked` sees it.
fn leader_and_isr(cluster: &Cluster, asked: i32, topic: &str) -> (i32, Vec<i32>) {
    let m = metadata(&mut cluster.node(asked).client(), topic);
    let p = &m.topics[0].partitions[0];
    (p.leader_id.0, p.isr_nodes.iter().map(|b| b.0).collect())
}

fn await_placement(cluster: &Cluster, asked: i32, topic: &str, want: (i32, Vec<i32>)) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = leader_and_isr(cluster, asked, topic);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: want leader and ISR {want:?}, node {asked} says {got:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every record of partition 0 from offset 0, read from `node`: (offset, value).
fn read_from(cluster: &Cluster, node: i32, topic: &str) -> (i16, Vec<(i64, String)>) {
    let mut c = cluster.node(node).client();
    let r: FetchResponse = c.send(ApiKey::Fetch, 12, &Client::fetch_request(topic, 0, 0, 0, 0));
    let p = &r.responses[0].partitions[0];
    (
        p.error_code,
        common::records(p.records.clone().unwrap_or_default()),
    )
}

/// A follower that was down while its leader compacted the log fetches the compacted
/// batches, gaps in offsets and all, and serves the same records once it leads.
#[test]
fn a_follower_copies_a_compacted_log_with_its_gaps() {
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopicConfig,
    };
    let mut cluster = Cluster::start();
    let topic = "compacted";
    let config = |k: &str, v: &str| {
        CreatableTopicConfig::default()
            .with_name(kafka_protocol::protocol::StrBytes::from_string(k.into()))
            .with_value(Some(kafka_protocol::protocol::StrBytes::from_string(
                v.into(),
            )))
    };
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![1.into(), 2.into()])])
            .with_configs(vec![
                config("cleanup.policy", "compact"),
                config("segment.ms", "1"),
                config("min.cleanable.dirty.ratio", "0.01"),
            ])]);
    let created: CreateTopicsResponse =
        cluster
            .node(3)
            .client()
            .send(ApiKey::CreateTopics, 7, &create);
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    await_placement(&cluster, 3, topic, (1, vec![1, 2]));

    // Node 2 goes down; once it is out of the ISR, node 1 alone commits.
    cluster.nodes[1].kill9();
    await_placement(&cluster, 3, topic, (1, vec![1]));
    let mut c = cluster.node(1).client();
    // Each batch sets k0..k2 (common::batch keys its values k0, k1, ...).
    for round in ["a", "b", "c", "d"] {
        std::thread::sleep(Duration::from_millis(5)); // each batch rolls the segment
        let values = [round, round, round];
        let (err, _) = c.produce(topic, 0, common::batch(&values), 1);
        assert_eq!(err, 0);
    }
    // The leader cleans: rounds a and b go, c stays (latest when cleaned), d is active.
    let want: Vec<(i64, String)> = (6..12)
        .map(|o| (o, if o < 9 { "c" } else { "d" }.to_string()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_from(&cluster, 1, topic).1 != want {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            read_from(&cluster, 1, topic)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Node 2 comes back at offset 0 and copies the leader's batches from 6 on.
    cluster.nodes[1].restart();
    await_placement(&cluster, 3, topic, (1, vec![1, 2]));
    // Node 1 goes down; node 2, in the ISR, leads and serves what it copied.
    cluster.nodes[0].kill9();
    await_placement(&cluster, 3, topic, (2, vec![2]));
    let (err, got) = read_from(&cluster, 2, topic);
    assert_eq!(err, 0);
    // Node 2 cleans its own copy too: round c goes there once d is no longer its active
    // segment (when the two batches arrived in different milliseconds).
    assert!(got == want || got[..] == want[3..], "{got:?}");
}
