//! A three-node cluster of real `cairn` processes (combined broker and controller, as
//! compat-tests/run-all.sh starts for its cluster suites), driven at the protocol level
//! where a client library would hide what is checked.

mod common;

use std::time::{Duration, Instant};

use common::{batch, name, Broker, Client};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, CreateTopicsRequest,
    CreateTopicsResponse, DeleteGroupsResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, DescribeLogDirsRequest, DescribeLogDirsResponse, FetchResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, MetadataRequest, MetadataResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    ProduceResponse,
};
use kafka_protocol::protocol::StrBytes;

const NODES: [i32; 3] = [1, 2, 3];

struct Cluster {
    nodes: Vec<Broker>,
    /// Each node's metrics listener (secured clusters only).
    metrics: Vec<std::net::SocketAddr>,
    /// Each node's controller listener port.
    controller: Vec<u16>,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        Cluster::start_with(&[])
    }

    /// A cluster whose nodes all start with `overrides` too.
    fn start_with(overrides: &[&str]) -> Cluster {
        Cluster::launch(overrides, false)
    }

    /// A cluster whose brokers replicate over a SASL_SSL listener of their own and whose
    /// quorum speaks TLS (`overrides` say how both are secured); the tests' clients use the
    /// PLAINTEXT listener.
    fn start_secured(overrides: &[&str]) -> Cluster {
        Cluster::launch(overrides, true)
    }

    fn launch(overrides: &[&str], secured: bool) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let ports: Vec<u16> = NODES.iter().map(|_| common::free_port()).collect();
        let sasl_ssl: Vec<u16> = NODES.iter().map(|_| common::free_port()).collect();
        let ctrl: Vec<u16> = NODES.iter().map(|_| common::free_port()).collect();
        let metrics: Vec<std::net::SocketAddr> = match secured {
            true => NODES
                .iter()
                .map(|_| {
                    format!("127.0.0.1:{}", common::free_port())
                        .parse()
                        .unwrap()
                })
                .collect(),
            false => Vec::new(),
        };
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
                let secure = match secured {
                    true => format!(",SASL_SSL://127.0.0.1:{}", sasl_ssl[k]),
                    false => String::new(),
                };
                let listeners = format!(
                    "listeners=PLAINTEXT://127.0.0.1:{port}{secure},CONTROLLER://127.0.0.1:{cport}"
                );
                let advertised =
                    format!("advertised.listeners=PLAINTEXT://127.0.0.1:{port}{secure}");
                let metrics_listener = metrics
                    .get(k)
                    .map(|m| format!("metrics.listener={m}"))
                    .unwrap_or_else(|| "metrics.listener=none".to_string());
                let mut all = vec![
                    node.as_str(),
                    "process.roles=broker,controller",
                    &voters,
                    "controller.listener.names=CONTROLLER",
                    &listeners,
                    &advertised,
                    &metrics_listener,
                ];
                if secured {
                    all.extend_from_slice(&[
                        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,\
                         CONTROLLER:SSL",
                        "inter.broker.listener.name=SASL_SSL",
                    ]);
                }
                all.extend_from_slice(overrides);
                Broker::launch_in(&tmp.path().join(format!("data-{i}")), port, &all)
            })
            .collect();
        for n in &mut nodes {
            n.await_listening();
        }
        Cluster {
            nodes,
            metrics,
            controller: ctrl,
            _tmp: tmp,
        }
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
    create_unreplicated(&mut admin, topic, 3);
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
    let mut cluster = Cluster::start();
    let topic = "compacted";
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "1"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ];
    create_placed(
        &mut cluster.node(3).client(),
        topic,
        &[1, 2],
        configs.to_vec(),
    );
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

/// Brokers replicate over SASL_SSL: mutual TLS (each presents the listener's keystore and
/// checks the others against its truststore, host names included), then a SCRAM-SHA-512
/// login as `broker`, a super user of the authorizer; the controller quorum runs over mutual
/// TLS too. Until that user's credential exists
/// the followers cannot log in, copy nothing, and acks=all times out; once an admin creates
/// it (over the controller quorum, which does not need the inter-broker listener) they log
/// in and catch up, the record written before included.
#[test]
fn brokers_replicate_over_sasl_ssl_once_they_can_log_in() {
    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
    use kafka_protocol::messages::{
        AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    };
    let certs = common::test_certs();
    let store = |kind: &str, file: &str, password: &str| {
        [
            format!("ssl.{kind}.location={}", certs.join(file).display()),
            format!("ssl.{kind}.password={password}"),
            format!("ssl.{kind}.type=PKCS12"),
        ]
    };
    let mut settings: Vec<String> = Vec::new();
    settings.extend(store("keystore", "broker.p12", "broker-pass"));
    settings.extend(store("truststore", "ca.p12", "trust-pass"));
    settings.extend(
        [
            "listener.name.sasl_ssl.ssl.client.auth=required",
            "listener.name.controller.ssl.client.auth=required",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.\
             security.scram.ScramLoginModule required username=\"broker\" \
             password=\"broker-secret\";",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            // The brokers' principal; the tests' PLAINTEXT clients are ANONYMOUS.
            "super.users=User:broker;User:ANONYMOUS",
            // Followers that cannot log in stay in the ISR: acks=all waits for them.
            "replica.lag.time.max.ms=600000",
            // The brokers' sessions last 2 s: the followers' fetchers log in again on their
            // connection before that (KIP-368), as Kafka's brokers do.
            "listener.name.sasl_ssl.connections.max.reauth.ms=2000",
        ]
        .map(String::from),
    );
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let cluster = Cluster::start_secured(&settings);
    let topic = "secured";
    create_placed(&mut cluster.node(1).client(), topic, &[1, 2, 3], Vec::new());
    await_placement(&cluster, 1, topic, (1, vec![1, 2, 3]));

    // No credential for `broker` yet: the followers' logins fail, acks=all times out.
    let mut c = cluster.node(1).client();
    let (err, _) = c.produce(topic, 0, batch(&["before"]), -1);
    assert_eq!(
        err, 7,
        "acks=all must time out while no follower can log in"
    );
    for follower in [2, 3] {
        let size = partition_size(&mut cluster.node(follower).client(), topic, 0);
        assert_eq!(size, Some(0), "node {follower} copied without logging in");
    }

    // The admin creates the brokers' credential; the followers log in and catch up.
    let m = cairn::security::scram::Mechanism::Sha512;
    let salt = b"the brokers' salt";
    let upsert = ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_static_str("broker"))
        .with_mechanism(m.wire())
        .with_iterations(8192)
        .with_salt(bytes::Bytes::from_static(salt))
        .with_salted_password(m.salted_password("broker-secret", salt, 8192).into());
    let req = AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsert]);
    let r: AlterUserScramCredentialsResponse = c.send(ApiKey::AlterUserScramCredentials, 0, &req);
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (err, _) = c.produce(topic, 0, batch(&["after"]), -1);
        if err == 0 {
            break;
        }
        assert_eq!(err, 7, "acks=all");
        assert!(Instant::now() < deadline, "the followers never caught up");
    }
    let leader = partition_size(&mut c, topic, 0).unwrap();
    assert!(leader > 0);
    followers_copy(&cluster, topic, leader);

    // The followers keep fetching from node 1 over sessions of 2 s: each re-authenticates
    // on its connection, and node 1 never has to close one for an ended session.
    followers_reauthenticate_in_place(&cluster);
}

/// Nodes 2 and 3 reach `size` in partition 0 of `topic` within a minute.
fn followers_copy(cluster: &Cluster, topic: &str, size: i64) {
    for follower in [2, 3] {
        let mut f = cluster.node(follower).client();
        let deadline = Instant::now() + Duration::from_secs(60);
        while partition_size(&mut f, topic, 0) != Some(size) {
            assert!(
                Instant::now() < deadline,
                "node {follower} did not copy the log"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Node 1's SASL_SSL listener counts at least 4 re-authentications (the followers'
/// fetchers renewing their sessions), no connection closed for an ended session and no
/// failed re-authentication.
fn followers_reauthenticate_in_place(cluster: &Cluster) {
    let count = |name: &str| {
        let (_, text) = common::http_get(cluster.metrics[0], "/metrics");
        common::metric_value(&text, name, &[("listener", "SASL_SSL")]).unwrap_or(0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while count("kafka_server_socket_server_metrics_successful_reauthentication_total") < 4.0 {
        assert!(
            Instant::now() < deadline,
            "the followers did not re-authenticate"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        count("kafka_server_socket_server_metrics_expired_connections_killed_count"),
        0.0,
        "a follower's session ended unrenewed"
    );
    assert_eq!(
        count("kafka_server_socket_server_metrics_failed_reauthentication_total"),
        0.0
    );
}

/// The tests' keystore (PKCS12) and truststore (PEM) for every TLS listener.
fn tls_stores() -> Vec<String> {
    let certs = common::test_certs();
    vec![
        format!(
            "ssl.keystore.location={}",
            certs.join("broker.p12").display()
        ),
        "ssl.keystore.password=broker-pass".into(),
        format!("ssl.truststore.location={}", certs.join("ca.pem").display()),
        "ssl.truststore.type=PEM".into(),
    ]
}

/// Brokers that log in to each other with OAUTHBEARER, Kafka's unsecured tokens made from
/// the login module's claims (`unsecuredLoginStringClaim_sub`), a fresh token per login.
#[test]
fn brokers_replicate_logging_in_with_oauthbearer_tokens() {
    let mut settings = tls_stores();
    settings.extend(
        [
            "sasl.enabled.mechanisms=OAUTHBEARER",
            "sasl.mechanism.inter.broker.protocol=OAUTHBEARER",
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.\
             security.oauthbearer.OAuthBearerLoginModule required \
             unsecuredLoginStringClaim_sub=\"broker\";",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            // The brokers' principal (the tokens' sub); the tests' clients are ANONYMOUS.
            "super.users=User:broker;User:ANONYMOUS",
            "listener.name.sasl_ssl.connections.max.reauth.ms=2000",
        ]
        .map(String::from),
    );
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let cluster = Cluster::start_secured(&settings);
    let topic = "oauth";
    create_placed(&mut cluster.node(1).client(), topic, &[1, 2, 3], Vec::new());
    await_placement(&cluster, 1, topic, (1, vec![1, 2, 3]));
    let mut c = cluster.node(1).client();
    let (err, _) = c.produce(topic, 0, batch(&["a", "b", "c"]), -1);
    assert_eq!(err, 0, "acks=all");
    let leader = partition_size(&mut c, topic, 0).unwrap();
    followers_copy(&cluster, topic, leader);
    followers_reauthenticate_in_place(&cluster);
}

/// The quorum over SASL_PLAINTEXT: voters log in to each other (and brokers to the active
/// controller) with PLAIN as `controller` before any Raft or broker RPC, over sessions of
/// 2 s, which the dialling side renews by dialling again before they end. A connection
/// that sends an RPC or an absurd frame before logging in, logs in with a wrong password,
/// or never logs in, is refused and closed, counted as a failed authentication, and the
/// quorum goes on deciding.
#[test]
fn voters_log_in_to_each_other_on_a_sasl_controller_listener() {
    use kafka_protocol::messages::{
        SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
        SaslHandshakeResponse,
    };
    let mut settings = tls_stores();
    settings.extend([
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,\
         CONTROLLER:SASL_PLAINTEXT"
            .into(),
        "sasl.enabled.mechanisms=PLAIN".into(),
        "sasl.mechanism.inter.broker.protocol=PLAIN".into(),
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.\
         plain.PlainLoginModule required username=\"broker\" password=\"b-secret\" \
         user_broker=\"b-secret\";"
            .into(),
        "sasl.mechanism.controller.protocol=PLAIN".into(),
        "listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.\
         plain.PlainLoginModule required username=\"controller\" password=\"c-secret\" \
         user_controller=\"c-secret\";"
            .into(),
        "listener.name.controller.connections.max.reauth.ms=2000".into(),
    ]);
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let cluster = Cluster::start_secured(&settings);
    let count = |name: &str| -> f64 {
        cluster
            .metrics
            .iter()
            .map(|m| {
                let (_, text) = common::http_get(*m, "/metrics");
                common::metric_value(&text, name, &[("listener", "CONTROLLER")]).unwrap_or(0.0)
            })
            .sum()
    };
    let logins = "kafka_server_socket_server_metrics_successful_authentication_total";
    let failures = "kafka_server_socket_server_metrics_failed_authentication_total";
    let topic = "quorum-logged-in";
    create_placed(&mut cluster.node(1).client(), topic, &[1, 2, 3], Vec::new());
    await_placement(&cluster, 1, topic, (1, vec![1, 2, 3]));

    // The leader's connections to the others, which carry its heartbeats, outlive three
    // sessions: each is dialled again before its session ends, never used after.
    let first = count(logins);
    assert!(first >= 2.0, "the voters logged in {first} times");
    std::thread::sleep(Duration::from_secs(6));
    assert!(count(logins) > first, "no logins as the sessions end");
    assert_eq!(
        count("kafka_server_socket_server_metrics_expired_connections_killed_count"),
        0.0,
        "a voter's connection was used after its session ended"
    );
    assert_eq!(count(failures), 0.0);

    let ctrl = std::net::SocketAddr::from(([127, 0, 0, 1], cluster.controller[0]));
    // A connection that never logs in: closed after 10 s, counted (checked last).
    let mut silent = Client::connect(ctrl);
    // A frame longer than any login could be: closed, counted.
    let mut c = Client::connect(ctrl);
    c.send_raw(&(64u32 << 20).to_be_bytes());
    assert!(c.is_closed(), "a 64 MiB login frame was waited for");
    // An RPC (here a Kafka Metadata request) before logging in: closed, counted.
    let mut c = Client::connect(ctrl);
    c.send_only(ApiKey::Metadata, 12, &MetadataRequest::default());
    assert!(c.is_closed(), "served before logging in");
    // A wrong password: answered SASL_AUTHENTICATION_FAILED, then closed, counted.
    let mut c = Client::connect(ctrl);
    let h: SaslHandshakeResponse = c.send(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    );
    assert_eq!(h.error_code, 0, "{h:?}");
    let token = bytes::Bytes::from_static(b"\0controller\0wrong");
    let a: SaslAuthenticateResponse = c.send(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(token),
    );
    assert_eq!(a.error_code, 58, "{a:?}");
    assert!(c.is_closed(), "kept open after a failed login");
    // The quorum goes on deciding.
    create_placed(
        &mut cluster.node(2).client(),
        "after",
        &[2, 3, 1],
        Vec::new(),
    );
    await_placement(&cluster, 2, "after", (2, vec![2, 3, 1]));
    assert!(
        silent.is_closed(),
        "a connection that never logged in was kept"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(failures) < 4.0 {
        assert!(
            Instant::now() < deadline,
            "the refused logins were not all counted: {}",
            count(failures)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Creates `topic` with one partition on `replicas` (the first leads) and `configs`,
/// through `c`, once `c`'s node lists every replica among the live brokers (a node
/// listens before its broker has registered, and an assignment may name only registered
/// brokers).
fn create_placed(c: &mut Client, topic: &str, replicas: &[i32], configs: Vec<(&str, &str)>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m: MetadataResponse = c.send(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(Some(Vec::new())),
        );
        let live: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
        if replicas.iter().all(|r| live.contains(r)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "brokers {replicas:?} are not all live: {live:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopicConfig,
    };
    let configs = configs
        .into_iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.into()))
                .with_value(Some(StrBytes::from_string(v.into())))
        })
        .collect();
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(replicas.iter().map(|&b| b.into()).collect())])
            .with_configs(configs)]);
    let created: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &create);
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
}

/// Creates `topic` with `partitions` partitions of one replica each, through `c`.
fn create_unreplicated(c: &mut Client, topic: &str, partitions: i32) {
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)]);
    let created: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &create);
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
}

/// The node coordinating `group`, as FindCoordinator on `c` answers once it can.
fn coordinator_of(c: &mut Client, group: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r: FindCoordinatorResponse = c.send(
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.into())),
        );
        if r.error_code == 0 {
            return r.node_id.0;
        }
        assert!(
            Instant::now() < deadline,
            "no coordinator for {group}: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The size of `topic`-`partition` as DescribeLogDirs on `c` reports it.
fn partition_size(c: &mut Client, topic: &str, partition: i32) -> Option<i64> {
    let r: DescribeLogDirsResponse = c.send(
        ApiKey::DescribeLogDirs,
        4,
        &DescribeLogDirsRequest::default().with_topics(None),
    );
    r.results
        .iter()
        .flat_map(|d| &d.topics)
        .filter(|t| t.name.as_str() == topic)
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == partition)
        .map(|p| p.partition_size)
}

/// (partition, committed offset) of `group` for `topic` partitions 0..n, or the error.
fn committed(c: &mut Client, group: &str, topic: &str, n: i32) -> Result<Vec<(i32, i64)>, i16> {
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(name(topic))
            .with_partition_indexes((0..n).collect())]));
    let r: OffsetFetchResponse = c.send(ApiKey::OffsetFetch, 7, &req);
    if r.error_code != 0 {
        return Err(r.error_code);
    }
    Ok(r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset))
        .collect())
}

/// A million offset commits over four groups leave `__consumer_offsets` near its live set
/// on every replica (each cleans its own copy), and a coordinator that takes over after
/// kill -9 of the old one loads the compacted log: the latest offset of every partition of
/// every group, and nothing of the group deleted.
#[test]
fn a_million_commits_leave_the_offsets_topic_near_its_live_set() {
    const GROUPS: usize = 4;
    const PARTITIONS: i32 = 250;
    const ROUNDS: i64 = 1000;
    let cluster = Cluster::start_with(&[
        "offsets.topic.num.partitions=1",
        "offsets.topic.segment.bytes=1048576",
        "log.cleaner.backoff.ms=200",
    ]);
    let topic = "committed";
    let mut admin = cluster.node(1).client();
    create_unreplicated(&mut admin, topic, PARTITIONS);
    let groups: Vec<String> = (0..GROUPS).map(|g| format!("offsets-{g}")).collect();
    let coordinator = coordinator_of(&mut admin, &groups[0]);
    for g in &groups {
        assert_eq!(coordinator_of(&mut admin, g), coordinator, "one partition");
    }
    let mut c = cluster.node(coordinator).client();
    // Once the coordinator knows the topic and has loaded its partition (round 0), rounds
    // of one commit request per group (every partition, offset = round), 64 requests in
    // flight at a time.
    for g in &groups {
        commit(&mut c, g, topic, PARTITIONS, 0);
    }
    let commit = |round: i64, group: &str| commit_request(group, topic, PARTITIONS, round);
    let requests: Vec<(i64, &String)> = (1..=ROUNDS)
        .flat_map(|round| groups.iter().map(move |g| (round, g)))
        .collect();
    for window in requests.chunks(64) {
        let sent: Vec<i32> = window
            .iter()
            .map(|(round, g)| c.send_only(ApiKey::OffsetCommit, 8, &commit(*round, g)))
            .collect();
        for correlation in sent {
            let body = c.read_frame().expect("an OffsetCommit response");
            let r: OffsetCommitResponse =
                cairn::wire::decode_response(ApiKey::OffsetCommit, 8, correlation, body).unwrap();
            let errors = commit_errors(&r);
            assert!(errors.is_empty(), "commit errors: {errors:?}");
        }
    }
    assert_eq!(GROUPS as i64 * PARTITIONS as i64 * ROUNDS, 1_000_000);
    // The last group goes: its offsets become tombstones.
    let deleted = groups.last().unwrap();
    let r: DeleteGroupsResponse = c.send(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default()
            .with_groups_names(vec![GroupId(StrBytes::from_string(deleted.clone()))]),
    );
    assert_eq!(r.results[0].error_code, 0, "{r:?}");

    // Uncompacted, a million commits take tens of MB; the live set is 1,000 keys, plus the
    // active segment (1 MiB at most).
    let bound = 4 << 20;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let sizes: Vec<Option<i64>> = NODES
            .iter()
            .map(|&i| partition_size(&mut cluster.node(i).client(), "__consumer_offsets", 0))
            .collect();
        eprintln!("__consumer_offsets-0 on each node: {sizes:?} bytes");
        if sizes.iter().all(|s| s.is_some_and(|s| s < bound)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "__consumer_offsets-0 is not compacted on every replica: {sizes:?} bytes"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // The coordinator dies; another loads the compacted partition.
    let mut cluster = cluster;
    cluster.nodes[(coordinator - 1) as usize].kill9();
    let other = NODES.iter().copied().find(|&i| i != coordinator).unwrap();
    let mut c = cluster.node(other).client();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (next, mut c) = loop {
        let next = coordinator_of(&mut c, &groups[0]);
        if next != coordinator {
            let mut nc = cluster.node(next).client();
            // COORDINATOR_LOAD_IN_PROGRESS (14) while it loads, NOT_COORDINATOR (16) until
            // its metadata catches up.
            match committed(&mut nc, &groups[0], topic, PARTITIONS) {
                Ok(_) => break (next, nc),
                Err(e) => assert!(e == 14 || e == 16, "OffsetFetch error {e}"),
            }
        }
        assert!(Instant::now() < deadline, "no coordinator took over");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_ne!(next, coordinator);
    let latest: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, ROUNDS)).collect();
    for g in &groups[..GROUPS - 1] {
        assert_eq!(
            committed(&mut c, g, topic, PARTITIONS).unwrap(),
            latest,
            "{g}"
        );
    }
    let none: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, -1)).collect();
    assert_eq!(committed(&mut c, deleted, topic, PARTITIONS).unwrap(), none);
}

/// OffsetCommit of `offset` for partitions 0..n of `topic` as `group` (a simple commit, no
/// member).
fn commit_request(group: &str, topic: &str, n: i32, offset: i64) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name(topic))
            .with_partitions(
                (0..n)
                    .map(|p| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(offset)
                    })
                    .collect(),
            )])
}

/// The error codes of an OffsetCommit response's partitions that failed.
fn commit_errors(r: &OffsetCommitResponse) -> Vec<i16> {
    r.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .filter(|e| *e != 0)
        .collect()
}

/// Commits `offset` for partitions 0..n of `topic` as `group`, asserting no partition
/// failed. Retriable answers are retried for a minute, as clients do: a topic just created
/// elsewhere may not be known here yet, and a coordinator may still be loading.
fn commit(c: &mut Client, group: &str, topic: &str, n: i32, offset: i64) {
    const RETRIABLE: [i16; 4] = [
        3,  // UNKNOWN_TOPIC_OR_PARTITION
        14, // COORDINATOR_LOAD_IN_PROGRESS
        15, // COORDINATOR_NOT_AVAILABLE
        16, // NOT_COORDINATOR
    ];
    let req = commit_request(group, topic, n, offset);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r: OffsetCommitResponse = c.send(ApiKey::OffsetCommit, 8, &req);
        let errors = commit_errors(&r);
        if errors.is_empty() {
            return;
        }
        assert!(
            errors.iter().all(|e| RETRIABLE.contains(e)) && Instant::now() < deadline,
            "commit errors of {group}: {errors:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Records of the partition `c`'s broker leads whose key names `id`: (tombstones, others).
fn records_naming(c: &mut Client, topic: &str, partition: i32, id: &str) -> (usize, usize) {
    let (mut tombstones, mut others) = (0, 0);
    let mut at = 0;
    loop {
        let resp: FetchResponse = c.send(
            ApiKey::Fetch,
            12,
            &Client::fetch_request(topic, partition, at, 0, 0),
        );
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch {topic}-{partition} at {at}");
        let mut bytes = p.records.clone().expect("records are never null");
        if bytes.is_empty() {
            break;
        }
        while !bytes.is_empty() {
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes).unwrap();
            for r in set.records {
                at = at.max(r.offset + 1);
                let names = r
                    .key
                    .as_ref()
                    .is_some_and(|k| k.windows(id.len()).any(|w| w == id.as_bytes()));
                match (names, r.value.is_none()) {
                    (true, true) => tombstones += 1,
                    (true, false) => others += 1,
                    _ => {}
                }
            }
        }
        if at >= p.high_watermark {
            break;
        }
    }
    (tombstones, others)
}

/// The coordinators' tombstones go after `delete.retention.ms`, as in Kafka, and a broker
/// that comes to lead a partition rebuilds its state from the whole log: a group deleted
/// while another broker led stays deleted on one that held the group in its own store
/// and whose log no longer has the deletes (applying only the records past what it had
/// applied before would bring the group back).
#[test]
fn a_coordinator_rebuilding_after_its_tombstones_went_keeps_the_group_deleted() {
    const PARTITIONS: i32 = 4;
    let mut cluster = Cluster::start_with(&[
        "offsets.topic.num.partitions=1",
        "log.roll.ms=300",
        "log.cleaner.backoff.ms=100",
        "log.cleaner.min.cleanable.ratio=0.01",
        "log.cleaner.delete.retention.ms=0",
    ]);
    let topic = "rebuilt";
    let mut admin = cluster.node(1).client();
    create_unreplicated(&mut admin, topic, PARTITIONS);
    let first = coordinator_of(&mut admin, "kept");
    let preferred = await_leaders(&cluster, "__consumer_offsets", 1);
    eprintln!("__consumer_offsets-0: leader {first}, placement {preferred:?}");
    // Asked throughout: a node that is never stopped.
    let other = NODES.iter().copied().find(|&i| i != first).unwrap();
    let mut admin = cluster.node(other).client();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut round = 0;
    for attempt in 0.. {
        assert!(
            Instant::now() < deadline,
            "the cleaner never removed the deletes before the first coordinator led again"
        );
        let doomed = format!("doomed-{attempt}");
        // The first coordinator applies the group's commits to its store.
        assert_eq!(coordinator_of(&mut admin, &doomed), first);
        let mut c = cluster.node(first).client();
        commit(&mut c, &doomed, topic, PARTITIONS, 7);
        round += 1;
        commit(&mut c, "kept", topic, PARTITIONS, round);
        // It stops; another leads, deletes the group and goes on committing, while the
        // first, back as a follower, copies the deletes and cleans them away on its own.
        cluster.nodes[(first - 1) as usize].stop();
        let next = loop {
            let next = coordinator_of(&mut admin, "kept");
            if next != first {
                break next;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        cluster.nodes[(first - 1) as usize].restart();
        let mut c = cluster.node(next).client();
        let r: DeleteGroupsResponse = loop {
            let r: DeleteGroupsResponse = c.send(
                ApiKey::DeleteGroups,
                2,
                &DeleteGroupsRequest::default()
                    .with_groups_names(vec![GroupId(StrBytes::from_string(doomed.clone()))]),
            );
            // COORDINATOR_LOAD_IN_PROGRESS while the new coordinator loads.
            if r.results[0].error_code != 14 {
                break r;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(r.results[0].error_code, 0, "{r:?}");
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            round += 1;
            commit(&mut c, "kept", topic, PARTITIONS, round);
            std::thread::sleep(Duration::from_millis(50));
        }
        // The first coordinator leads again once it is back in the ISR.
        let elected = loop {
            let r: kafka_protocol::messages::ElectLeadersResponse = admin.send(
                ApiKey::ElectLeaders,
                2,
                &kafka_protocol::messages::ElectLeadersRequest::default()
                    .with_election_type(0)
                    .with_topic_partitions(Some(vec![
                        kafka_protocol::messages::elect_leaders_request::TopicPartitions::default()
                            .with_topic(name("__consumer_offsets"))
                            .with_partitions(vec![0]),
                    ]))
                    .with_timeout_ms(10_000),
            );
            let e = r.replica_election_results[0].partition_result[0].error_code;
            // PREFERRED_LEADER_NOT_AVAILABLE (80) until it is back in the ISR.
            if e != 80 {
                break e;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        // ELECTION_NOT_NEEDED (84): it led already.
        assert!(elected == 0 || elected == 84, "ElectLeaders: {elected}");
        let mut c = cluster.node(first).client();
        while coordinator_of(&mut admin, "kept") != first {
            std::thread::sleep(Duration::from_millis(100));
        }
        let offsets = loop {
            match committed(&mut c, &doomed, topic, PARTITIONS) {
                Ok(o) => break o,
                Err(e) => assert!(e == 14 || e == 16, "OffsetFetch error {e}"),
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let (tombstones, others) = records_naming(&mut c, "__consumer_offsets", 0, &doomed);
        eprintln!("attempt {attempt}: {doomed}: {tombstones} tombstones, {others} other records in the log; offsets {offsets:?}");
        let none: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, -1)).collect();
        assert_eq!(offsets, none, "{doomed} came back");
        if tombstones == 0 && others == 0 {
            // The deletes were gone from the log this broker rebuilt from.
            let latest: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, round)).collect();
            assert_eq!(
                committed(&mut c, "kept", topic, PARTITIONS).unwrap(),
                latest
            );
            return;
        }
    }
}

/// Dynamic broker configs in a cluster: the cluster's default set through one node holds
/// on every node; one broker's own config holds on that broker only.
#[test]
fn dynamic_broker_configs_and_client_quotas_reach_every_node_or_just_their_own() {
    use common::{alter_broker, describe_key, SET, TOPIC};
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    let cluster = Cluster::start();
    // A client quota set through node 3 is in every node's metadata.
    let quota = EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_entity_name(Some(StrBytes::from_static_str("alice")))])
        .with_ops(vec![OpData::default()
            .with_key(StrBytes::from_static_str("consumer_byte_rate"))
            .with_value(4096.0)]);
    let r: AlterClientQuotasResponse = cluster.node(3).client().send(
        ApiKey::AlterClientQuotas,
        1,
        &AlterClientQuotasRequest::default().with_entries(vec![quota]),
    );
    assert_eq!(r.entries[0].error_code, 0);
    let mut c1 = cluster.node(1).client();
    assert_eq!(c1.create_topic("dyn", 1, &[]), 0);
    let set = [("log.cleanup.policy", SET, Some("compact"))];
    assert_eq!(alter_broker(&mut c1, "", &set).0, 0);
    let retention = [("log.retention.ms", SET, Some("123456"))];
    let mut c2 = cluster.node(2).client();
    assert_eq!(alter_broker(&mut c2, "2", &retention).0, 0);
    for node in NODES {
        let mut c = cluster.node(node).client();
        // Each node applies the metadata in its own time.
        let deadline = Instant::now() + Duration::from_secs(30);
        let want_retention = if node == 2 { "123456" } else { "604800000" };
        loop {
            let policy = describe_key(&mut c, TOPIC, "dyn", "cleanup.policy");
            let kept = describe_key(&mut c, TOPIC, "dyn", "retention.ms");
            let quotas: DescribeClientQuotasResponse = c.send(
                ApiKey::DescribeClientQuotas,
                1,
                &DescribeClientQuotasRequest::default(),
            );
            let quotas: Vec<(String, f64)> = quotas
                .entries
                .unwrap_or_default()
                .iter()
                .flat_map(|e| e.values.iter())
                .map(|v| (v.key.to_string(), v.value))
                .collect();
            let got = (policy.map(|p| (p.0, p.1)), kept.map(|k| k.0), quotas);
            let want = (
                Some(("compact".to_string(), 3)),
                Some(want_retention.to_string()),
                vec![("consumer_byte_rate".to_string(), 4096.0)],
            );
            if got == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {node}: {got:?}, want {want:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
