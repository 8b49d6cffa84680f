//! ACLs against the real binary: the StandardAuthorizer on, `User:ANONYMOUS` (the
//! PLAINTEXT listener) as super user creating topics and ACLs with CreateAcls,
//! DescribeAcls and DeleteAcls, and alice and bob logged in with PLAIN on a SASL listener
//! getting Kafka's answers per API: refused operations answer TOPIC_, GROUP_, CLUSTER_ or
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Metadata hides what they may not describe, and
//! the ACLs outlive a restart. compat-tests/security compares a matrix with Kafka's.

mod common;

use std::net::SocketAddr;

use common::{batch, free_port, name, refuses_to_start, Broker, Client};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

const JAAS: &str = "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
    org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_alice=\"alice-secret\" \
    user_bob=\"bob-secret\";";

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const TXN: i8 = 5;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DESCRIBE: i8 = 8;
const ALL: i8 = 2;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

struct Secured {
    broker: Broker,
    sasl: SocketAddr,
    _dir: tempfile::TempDir,
}

fn overrides(plain: u16, sasl: u16) -> Vec<String> {
    vec![
        format!("listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"),
        "sasl.enabled.mechanisms=PLAIN".into(),
        JAAS.into(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        "super.users=User:ANONYMOUS".into(),
    ]
}

fn start() -> Secured {
    let (plain, sasl) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let o = overrides(plain, sasl);
    let refs: Vec<&str> = o.iter().map(String::as_str).collect();
    let mut broker = Broker::launch_in(&dir.path().join("data"), plain, &refs);
    broker.await_listening();
    Secured {
        broker,
        sasl: format!("127.0.0.1:{sasl}").parse().unwrap(),
        _dir: dir,
    }
}

/// A connection logged in as `user` (PLAIN, password `<user>-secret`).
fn login(addr: SocketAddr, user: &str) -> Client {
    let mut c = Client::connect(addr);
    let h: SaslHandshakeResponse = c.send(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
    );
    assert_eq!(h.error_code, 0);
    let token = format!("\0{user}\0{user}-secret");
    let r: SaslAuthenticateResponse = c.send(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(token.into_bytes().into()),
    );
    assert_eq!(r.error_code, 0, "{r:?}");
    c
}

fn acl(rt: i8, name: &str, pt: i8, who: &str, op: i8, perm: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rt)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pt)
        .with_principal(s(who))
        .with_host(s("*"))
        .with_operation(op)
        .with_permission_type(perm)
}

fn create_acls(c: &mut Client, acls: Vec<AclCreation>) -> Vec<(i16, Option<String>)> {
    let r: CreateAclsResponse = c.send(
        ApiKey::CreateAcls,
        3,
        &CreateAclsRequest::default().with_creations(acls),
    );
    r.results
        .iter()
        .map(|r| {
            (
                r.error_code,
                r.error_message.as_ref().map(|m| m.to_string()),
            )
        })
        .collect()
}

fn any_filter() -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(1)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1)
}

/// DescribeAcls with `req`: (error, [(resource name, principal, operation)]).
fn describe_acls(c: &mut Client, req: &DescribeAclsRequest) -> (i16, Vec<(String, String, i8)>) {
    let r: DescribeAclsResponse = c.send(ApiKey::DescribeAcls, 3, req);
    let mut found = Vec::new();
    for res in &r.resources {
        for a in &res.acls {
            found.push((
                res.resource_name.to_string(),
                a.principal.to_string(),
                a.operation,
            ));
        }
    }
    found.sort();
    (r.error_code, found)
}

/// Metadata for `topics` (None: all): (name, error) per topic.
fn metadata(c: &mut Client, topics: Option<&[&str]>, create: bool) -> Vec<(String, i16)> {
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(create)
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| metadata_request::MetadataRequestTopic::default().with_name(Some(name(t))))
                .collect()
        }));
    let r: MetadataResponse = c.send(ApiKey::Metadata, 12, &req);
    let mut out: Vec<(String, i16)> = r
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.error_code,
            )
        })
        .collect();
    out.sort();
    out
}

fn join(c: &mut Client, group: &str) -> i16 {
    let req = JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(""))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
        )
        .with_name(s("range"))
        .with_metadata(bytes::Bytes::from_static(b"\0\0\0\0\0\0\0\0"))]);
    let r: JoinGroupResponse = c.send(ApiKey::JoinGroup, 5, &req);
    r.error_code
}

fn init_producer_id(c: &mut Client, txn: Option<&str>) -> i16 {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(txn.map(|t| TransactionalId(s(t))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    // The transaction coordinator's topic is made on first use: retriable codes until then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(t) = txn {
            // As clients do: FindCoordinator first (it makes the topic).
            let find = FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(vec![s(t)]);
            let _: FindCoordinatorResponse = c.send(ApiKey::FindCoordinator, 4, &find);
        }
        let r: InitProducerIdResponse = c.send(ApiKey::InitProducerId, 4, &req);
        if ![14, 15, 16].contains(&r.error_code) || std::time::Instant::now() > deadline {
            return r.error_code;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

const TAF: i16 = 29;

#[test]
fn every_api_answers_what_the_acls_allow() {
    let b = start();
    let mut admin = b.broker.client();
    for t in ["orders", "pay-in", "pay-secret", "hidden"] {
        assert_eq!(admin.create_topic(t, 1, &[]), 0, "{t}");
    }
    let mut alice = login(b.sasl, "alice");
    let mut bob = login(b.sasl, "bob");

    // No ACL yet: a non-super user may do nothing and sees no topic.
    assert_eq!(metadata(&mut alice, None, false), vec![]);
    assert_eq!(
        metadata(&mut alice, Some(&["orders", "nowhere"]), false),
        vec![("nowhere".into(), TAF), ("orders".into(), TAF)],
        "a named topic is refused whether or not it exists"
    );
    assert_eq!(alice.produce("orders", 0, batch(&["x"]), 1).0, TAF);
    assert_eq!(alice.fetch("orders", 0, 0).0, TAF);
    assert_eq!(alice.list_offset("orders", 0, -1).0, TAF);
    assert_eq!(alice.create_topic("alices", 1, &[]), TAF);
    assert_eq!(
        join(&mut alice, "g1"),
        ResponseError::GroupAuthorizationFailed.code()
    );
    assert_eq!(
        init_producer_id(&mut alice, None),
        ResponseError::ClusterAuthorizationFailed.code(),
        "an idempotent producer needs IDEMPOTENT_WRITE or WRITE on some topic"
    );
    // Share groups' offset APIs check the group (DESCRIBE, READ, DELETE); their state APIs
    // are for brokers only (CLUSTER_ACTION).
    let gaf = ResponseError::GroupAuthorizationFailed.code();
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s("sg"))),
    ]);
    let r: DescribeShareGroupOffsetsResponse =
        alice.send(ApiKey::DescribeShareGroupOffsets, 0, &req);
    assert_eq!(r.groups[0].error_code, gaf);
    let req = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s("sg")))
        .with_topics(vec![
            alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(TopicName(s("orders"))),
        ]);
    let r: AlterShareGroupOffsetsResponse = alice.send(ApiKey::AlterShareGroupOffsets, 0, &req);
    assert_eq!((r.error_code, r.responses.len()), (gaf, 0));
    let req = DeleteShareGroupOffsetsRequest::default().with_group_id(GroupId(s("sg")));
    let r: DeleteShareGroupOffsetsResponse = alice.send(ApiKey::DeleteShareGroupOffsets, 0, &req);
    assert_eq!(r.error_code, gaf);
    let req = InitializeShareGroupStateRequest::default()
        .with_group_id(s("sg"))
        .with_topics(vec![
            initialize_share_group_state_request::InitializeStateData::default()
                .with_topic_id(uuid::Uuid::from_u128(7))
                .with_partitions(vec![
                    initialize_share_group_state_request::PartitionData::default(),
                ]),
        ]);
    let r: InitializeShareGroupStateResponse =
        alice.send(ApiKey::InitializeShareGroupState, 0, &req);
    assert_eq!(
        r.results[0].partitions[0].error_code,
        ResponseError::ClusterAuthorizationFailed.code()
    );
    assert_eq!(
        init_producer_id(&mut alice, Some("tx-a")),
        ResponseError::TransactionalIdAuthorizationFailed.code()
    );
    // Only ALTER on the cluster may change ACLs, only DESCRIBE see them.
    let refused = create_acls(
        &mut alice,
        vec![acl(TOPIC, "orders", LITERAL, "User:alice", ALL, ALLOW)],
    );
    assert_eq!(
        refused[0].0,
        ResponseError::ClusterAuthorizationFailed.code()
    );
    assert_eq!(
        describe_acls(&mut alice, &any_filter()).0,
        ResponseError::ClusterAuthorizationFailed.code()
    );

    // The super user grants: alice writes orders, reads everything prefixed pay- but
    // pay-secret (a DENY wins), reads group g1 and writes transactional id tx-a; bob
    // describes the cluster.
    let results = create_acls(
        &mut admin,
        vec![
            acl(TOPIC, "orders", LITERAL, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "pay-", PREFIXED, "User:alice", READ, ALLOW),
            acl(TOPIC, "pay-secret", LITERAL, "User:alice", ALL, DENY),
            acl(GROUP, "g1", LITERAL, "User:alice", READ, ALLOW),
            acl(TXN, "tx-a", LITERAL, "User:alice", WRITE, ALLOW),
            acl(
                CLUSTER,
                "kafka-cluster",
                LITERAL,
                "User:bob",
                DESCRIBE,
                ALLOW,
            ),
            // Refused: MATCH is a filter, not a pattern; the cluster has one name; a
            // principal needs its type.
            acl(TOPIC, "x", 2, "User:alice", READ, ALLOW),
            acl(CLUSTER, "other", LITERAL, "User:alice", READ, ALLOW),
            acl(TOPIC, "x", LITERAL, "alice", READ, ALLOW),
        ],
    );
    let codes: Vec<i16> = results.iter().map(|r| r.0).collect();
    assert_eq!(codes, vec![0, 0, 0, 0, 0, 0, 42, 42, 42], "{results:?}");
    assert!(results[7].1.as_deref().unwrap().contains("kafka-cluster"));

    // Metadata lists what alice may describe (WRITE and READ imply DESCRIBE).
    assert_eq!(
        metadata(&mut alice, None, false),
        vec![("orders".into(), 0), ("pay-in".into(), 0)]
    );
    assert_eq!(alice.produce("orders", 0, batch(&["a"]), 1).0, 0);
    assert_eq!(
        alice.fetch("orders", 0, 0).0,
        TAF,
        "WRITE does not give READ"
    );
    assert_eq!(alice.produce("pay-in", 0, batch(&["b"]), 1).0, TAF);
    assert_eq!(admin.produce("pay-in", 0, batch(&["c"]), 1).0, 0);
    let (e, _, recs) = alice.fetch("pay-in", 0, 0);
    assert_eq!((e, recs.len()), (0, 1));
    assert_eq!(alice.fetch("pay-secret", 0, 0).0, TAF, "the DENY wins");
    assert_eq!(alice.list_offset("pay-in", 0, -1).0, 0);
    assert_eq!(alice.list_offset("hidden", 0, -1).0, TAF);
    assert_ne!(
        join(&mut alice, "g1"),
        ResponseError::GroupAuthorizationFailed.code()
    );
    assert_eq!(
        join(&mut alice, "g2"),
        ResponseError::GroupAuthorizationFailed.code()
    );
    assert_eq!(
        init_producer_id(&mut alice, None),
        0,
        "WRITE on a topic is enough"
    );
    assert_eq!(init_producer_id(&mut alice, Some("tx-a")), 0);
    assert_eq!(
        init_producer_id(&mut alice, Some("tx-b")),
        ResponseError::TransactionalIdAuthorizationFailed.code()
    );
    // Bob may describe the ACLs but not change them; filters as kafka-acls sends them.
    let (e, all) = describe_acls(&mut bob, &any_filter());
    assert_eq!((e, all.len()), (0, 6), "{all:?}");
    let matching = any_filter()
        .with_resource_type_filter(TOPIC)
        .with_resource_name_filter(Some(s("pay-secret")))
        .with_pattern_type_filter(2);
    assert_eq!(
        describe_acls(&mut bob, &matching).1,
        vec![
            ("pay-".into(), "User:alice".into(), READ),
            ("pay-secret".into(), "User:alice".into(), ALL),
        ]
    );
    assert_eq!(
        metadata(&mut bob, None, false),
        vec![],
        "DESCRIBE on the cluster is not on topics"
    );

    // ACLs are in the metadata log: a restart keeps them.
    let mut broker = b.broker;
    assert_eq!(broker.stop(), Some(0));
    broker.restart();
    let mut alice = login(b.sasl, "alice");
    assert_eq!(alice.produce("orders", 0, batch(&["d"]), 1).0, 0);

    // DeleteAcls: the removed bindings per filter; then alice is refused again.
    let mut admin = broker.client();
    let filter = DeleteAclsFilter::default()
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(TOPIC)
        .with_resource_name_filter(Some(s("orders")))
        .with_pattern_type_filter(LITERAL)
        .with_operation(1)
        .with_permission_type(1);
    let r: DeleteAclsResponse = admin.send(
        ApiKey::DeleteAcls,
        3,
        &DeleteAclsRequest::default().with_filters(vec![filter]),
    );
    assert_eq!(r.filter_results[0].error_code, 0);
    assert_eq!(r.filter_results[0].matching_acls.len(), 1);
    assert_eq!(r.filter_results[0].matching_acls[0].operation, WRITE);
    assert_eq!(alice.produce("orders", 0, batch(&["e"]), 1).0, TAF);
    assert_eq!(describe_acls(&mut admin, &any_filter()).1.len(), 5);
}

#[test]
fn metadata_creates_topics_only_for_principals_with_create() {
    let b = start();
    let mut admin = b.broker.client();
    let mut alice = login(b.sasl, "alice");
    // DESCRIBE but not CREATE on new-*: refused; with CREATE on the topic it is created.
    create_acls(
        &mut admin,
        vec![
            acl(TOPIC, "new-", PREFIXED, "User:alice", DESCRIBE, ALLOW),
            acl(TOPIC, "new-ok", LITERAL, "User:alice", 5, ALLOW),
        ],
    );
    assert_eq!(
        metadata(&mut alice, Some(&["new-no"]), true),
        vec![("new-no".into(), TAF)]
    );
    assert_eq!(
        metadata(&mut alice, Some(&["new-ok"]), true),
        vec![("new-ok".into(), 0)]
    );
    assert_eq!(
        metadata(&mut admin, Some(&["new-no"]), false),
        vec![("new-no".into(), 3)]
    );
}

#[test]
fn allow_everyone_if_no_acl_found_opens_only_uncovered_resources() {
    let (plain, sasl) = (free_port(), free_port());
    let mut o = overrides(plain, sasl);
    o.push("allow.everyone.if.no.acl.found=true".into());
    let refs: Vec<&str> = o.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::launch_in(&dir.path().join("data"), plain, &refs);
    broker.await_listening();
    let sasl: SocketAddr = format!("127.0.0.1:{sasl}").parse().unwrap();
    let mut admin = broker.client();
    admin.create_topic("open", 1, &[]);
    admin.create_topic("closed", 1, &[]);
    create_acls(
        &mut admin,
        vec![acl(TOPIC, "closed", LITERAL, "User:bob", READ, ALLOW)],
    );
    let mut alice = login(sasl, "alice");
    assert_eq!(alice.produce("open", 0, batch(&["x"]), 1).0, 0);
    assert_eq!(alice.produce("closed", 0, batch(&["x"]), 1).0, TAF);
}

#[test]
fn bad_authorizer_settings_stop_start_up() {
    refuses_to_start(
        &["authorizer.class.name=kafka.security.authorizer.AclAuthorizer"],
        &["authorizer.class.name", "StandardAuthorizer"],
        "\u{0}",
    );
    refuses_to_start(
        &[
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=admin",
        ],
        &["super.users", "User:name"],
        "\u{0}",
    );
}
