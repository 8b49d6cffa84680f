//! The group coordinator against a real broker process: a two-member rebalance over real
//! sockets, committed offsets surviving kill -9, and Kafka's error codes for bad group
//! requests (each leaving the group and the broker intact).

mod common;

use std::thread;

use bytes::Bytes;
use common::{name, Broker, Client};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn gid(v: &str) -> GroupId {
    GroupId(s(v))
}

fn join_req(group: &str, member: &str, session_ms: i32) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(gid(group))
        .with_member_id(s(member))
        .with_session_timeout_ms(session_ms)
        .with_rebalance_timeout_ms(60_000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(Bytes::from_static(b"sub"))])
}

/// JoinGroup v9 the way the Java client does it: MEMBER_ID_REQUIRED, then join with the id.
fn join(c: &mut Client, group: &str) -> JoinGroupResponse {
    let r: JoinGroupResponse = c.send(ApiKey::JoinGroup, 9, &join_req(group, "", 30_000));
    assert_eq!(r.error_code, ResponseError::MemberIdRequired.code());
    c.send(ApiKey::JoinGroup, 9, &join_req(group, &r.member_id, 30_000))
}

fn sync(
    c: &mut Client,
    group: &str,
    member: &str,
    generation: i32,
    assign: &[(&str, &str)],
) -> SyncGroupResponse {
    let req = SyncGroupRequest::default()
        .with_group_id(gid(group))
        .with_member_id(s(member))
        .with_generation_id(generation)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(
            assign
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(Bytes::from(a.to_string()))
                })
                .collect(),
        );
    c.send(ApiKey::SyncGroup, 5, &req)
}

fn heartbeat(c: &mut Client, group: &str, member: &str, generation: i32) -> i16 {
    let req = HeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_member_id(s(member))
        .with_generation_id(generation);
    let r: HeartbeatResponse = c.send(ApiKey::Heartbeat, 4, &req);
    r.error_code
}

fn commit(
    c: &mut Client,
    group: &str,
    member: &str,
    generation: i32,
    topic: &str,
    offsets: &[(i32, i64, &str)],
) -> Vec<i16> {
    let req = OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_member_id(s(member))
        .with_generation_id_or_member_epoch(generation)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name(topic))
            .with_partitions(
                offsets
                    .iter()
                    .map(|(p, o, m)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(*o)
                            .with_committed_leader_epoch(0)
                            .with_committed_metadata(Some(s(m)))
                    })
                    .collect(),
            )]);
    let r: OffsetCommitResponse = c.send(ApiKey::OffsetCommit, 9, &req);
    r.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect()
}

/// (partition, offset, metadata) committed by `group` for `topic` partitions 0..n.
fn committed(c: &mut Client, group: &str, topic: &str, n: i32) -> Vec<(i32, i64, String)> {
    let req = OffsetFetchRequest::default()
        .with_group_id(gid(group))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(name(topic))
            .with_partition_indexes((0..n).collect())]));
    let r: OffsetFetchResponse = c.send(ApiKey::OffsetFetch, 7, &req);
    assert_eq!(r.error_code, 0);
    r.topics[0]
        .partitions
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0);
            (
                p.partition_index,
                p.committed_offset,
                p.metadata
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

fn describe(c: &mut Client, group: &str) -> describe_groups_response::DescribedGroup {
    let r: DescribeGroupsResponse = c.send(
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![gid(group)]),
    );
    r.groups.into_iter().next().unwrap()
}

#[test]
fn two_members_rebalance_commit_and_offsets_survive_kill_9() {
    let mut b = Broker::start_with(&["group.initial.rebalance.delay.ms=0"]);
    let mut c = b.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("t", 2, &[]), 0);

    // a joins alone: generation 1, a leads
    let a = join(&mut c, "g");
    assert_eq!((a.error_code, a.generation_id), (0, 1));
    let a_id = a.member_id.to_string();
    assert_eq!(
        sync(&mut c, "g", &a_id, 1, &[(&a_id, "a:0,1")]).error_code,
        0
    );

    // b joins from another connection and parks until a rejoins
    let addr = b.addr;
    let joiner = thread::spawn(move || {
        let mut c2 = Client::connect(addr);
        let r = join(&mut c2, "g");
        (c2, r)
    });
    // a learns of the rebalance from its heartbeat, then rejoins
    let mut tries = 0;
    while heartbeat(&mut c, "g", &a_id, 1) != ResponseError::RebalanceInProgress.code() {
        tries += 1;
        assert!(tries < 500, "no rebalance signalled");
        thread::sleep(std::time::Duration::from_millis(20));
    }
    let a2: JoinGroupResponse = c.send(ApiKey::JoinGroup, 9, &join_req("g", &a_id, 30_000));
    let (mut c2, b_join) = joiner.join().unwrap();
    assert_eq!((a2.error_code, b_join.error_code), (0, 0));
    assert_eq!((a2.generation_id, b_join.generation_id), (2, 2));
    assert_eq!(a2.leader.as_str(), a_id, "the leader stays the leader");
    assert_eq!(a2.members.len(), 2, "the leader sees both members");
    assert!(b_join.members.is_empty(), "followers see none");
    let b_id = b_join.member_id.to_string();

    // b's sync parks until the leader's assignment arrives
    let follower = thread::spawn(move || {
        let r = sync(&mut c2, "g", &b_id, 2, &[]);
        (c2, b_id, r)
    });
    thread::sleep(std::time::Duration::from_millis(100));
    let a_sync = sync(
        &mut c,
        "g",
        &a_id,
        2,
        &[(&a_id, "a:0"), ("ignored-unknown", "x")],
    );
    let (mut c2, b_id, b_sync) = follower.join().unwrap();
    assert_eq!((a_sync.error_code, b_sync.error_code), (0, 0));
    assert_eq!(&a_sync.assignment[..], b"a:0");
    assert!(b_sync.assignment.is_empty(), "no assignment given: empty");
    assert_eq!(b_sync.protocol_name.as_deref(), Some("range"));

    let d = describe(&mut c, "g");
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.members.len(), 2);

    // commits with the right generation; wrong generation and unknown members refused
    assert_eq!(
        commit(&mut c, "g", &a_id, 2, "t", &[(0, 17, "meta-a")]),
        vec![0]
    );
    assert_eq!(commit(&mut c2, "g", &b_id, 2, "t", &[(1, 4, "")]), vec![0]);
    assert_eq!(
        commit(&mut c, "g", &a_id, 1, "t", &[(0, 99, "")]),
        vec![ResponseError::IllegalGeneration.code()]
    );
    assert_eq!(
        commit(&mut c, "g", "stranger", 2, "t", &[(0, 99, "")]),
        vec![ResponseError::UnknownMemberId.code()]
    );
    assert_eq!(
        commit(&mut c, "g", "", -1, "t", &[(0, 99, "")]),
        vec![ResponseError::UnknownMemberId.code()],
        "a group with members refuses generation -1 commits"
    );
    assert_eq!(
        heartbeat(&mut c, "g", &a_id, 1),
        ResponseError::IllegalGeneration.code()
    );
    assert_eq!(
        committed(&mut c, "g", "t", 2),
        vec![(0, 17, "meta-a".to_string()), (1, 4, String::new())]
    );

    // kill -9: offsets and the group's members come back
    b.kill9();
    b.restart();
    let mut c = b.client();
    c.await_group_coordinator();
    assert_eq!(
        committed(&mut c, "g", "t", 2),
        vec![(0, 17, "meta-a".to_string()), (1, 4, String::new())]
    );
    let d = describe(&mut c, "g");
    assert_eq!(
        d.members.len(),
        2,
        "members are restored (and must heartbeat to stay)"
    );
    assert_eq!(heartbeat(&mut c, "g", &a_id, 2), 0);

    // both leave (LeaveGroup v5, batched): the group is empty and can be deleted
    let leave = LeaveGroupRequest::default()
        .with_group_id(gid("g"))
        .with_members(
            [a_id.as_str(), b_id.as_str(), "ghost"]
                .iter()
                .map(|m| leave_group_request::MemberIdentity::default().with_member_id(s(m)))
                .collect(),
        );
    let r: LeaveGroupResponse = c.send(ApiKey::LeaveGroup, 5, &leave);
    let codes: Vec<i16> = r.members.iter().map(|m| m.error_code).collect();
    assert_eq!(codes, vec![0, 0, ResponseError::UnknownMemberId.code()]);
    assert_eq!(describe(&mut c, "g").group_state.as_str(), "Empty");
    let r: DeleteGroupsResponse = c.send(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![gid("g"), gid("never")]),
    );
    assert_eq!(r.results[0].error_code, 0);
    assert_eq!(
        r.results[1].error_code,
        ResponseError::GroupIdNotFound.code()
    );
    assert_eq!(committed(&mut c, "g", "t", 1), vec![(0, -1, String::new())]);
}

#[test]
fn bad_group_requests_get_kafka_errors_and_hurt_nobody() {
    let b = Broker::start_with(&[
        "group.initial.rebalance.delay.ms=0",
        "offset.metadata.max.bytes=16",
    ]);
    let mut c = b.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("t", 1, &[]), 0);
    // a healthy group that must stay healthy throughout
    let a = join(&mut c, "ok");
    let a_id = a.member_id.to_string();
    assert_eq!(sync(&mut c, "ok", &a_id, 1, &[]).error_code, 0);

    // empty group id
    let r: JoinGroupResponse = c.send(ApiKey::JoinGroup, 9, &join_req("", "", 30_000));
    assert_eq!(r.error_code, ResponseError::InvalidGroupId.code());
    // session timeout below group.min.session.timeout.ms
    let r: JoinGroupResponse = c.send(ApiKey::JoinGroup, 9, &join_req("x", "", 10));
    assert_eq!(r.error_code, ResponseError::InvalidSessionTimeout.code());
    // unknown member id in a known group, and in an unknown one
    let r: JoinGroupResponse = c.send(ApiKey::JoinGroup, 9, &join_req("ok", "who", 30_000));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    assert_eq!(
        heartbeat(&mut c, "nowhere", "who", 1),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        sync(&mut c, "ok", &a_id, 9, &[]).error_code,
        ResponseError::IllegalGeneration.code()
    );
    // a different protocol type cannot join a consumer group
    let other = join_req("ok", "", 30_000).with_protocol_type(s("connect"));
    let r: JoinGroupResponse = c.send(ApiKey::JoinGroup, 9, &other);
    assert_eq!(
        r.error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );
    // oversized metadata, unknown topic and partition: per-partition codes, nothing stored
    assert_eq!(
        commit(
            &mut c,
            "ok",
            &a_id,
            1,
            "t",
            &[(0, 5, "this metadata is too long")]
        ),
        vec![ResponseError::OffsetMetadataTooLarge.code()]
    );
    assert_eq!(
        commit(&mut c, "ok", &a_id, 1, "t", &[(3, 5, "")]),
        vec![ResponseError::UnknownTopicOrPartition.code()]
    );
    assert_eq!(
        commit(&mut c, "ok", &a_id, 1, "missing", &[(0, 5, "")]),
        vec![ResponseError::UnknownTopicOrPartition.code()]
    );
    assert_eq!(
        committed(&mut c, "ok", "t", 1),
        vec![(0, -1, String::new())]
    );
    // a group with members cannot be deleted
    let r: DeleteGroupsResponse = c.send(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![gid("ok")]),
    );
    assert_eq!(r.results[0].error_code, ResponseError::NonEmptyGroup.code());
    // FindCoordinator for a key type Kafka does not have is refused clearly
    let r: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default()
            .with_key(s("tx"))
            .with_key_type(7),
    );
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());

    // the healthy group never noticed
    assert_eq!(heartbeat(&mut c, "ok", &a_id, 1), 0);
    assert_eq!(
        commit(&mut c, "ok", &a_id, 1, "t", &[(0, 5, "fine")]),
        vec![0]
    );
    assert_eq!(
        committed(&mut c, "ok", "t", 1),
        vec![(0, 5, "fine".to_string())]
    );
}

fn consumer_heartbeat(
    c: &mut Client,
    member: &str,
    epoch: i32,
    owned: Option<Vec<consumer_group_heartbeat_request::TopicPartitions>>,
) -> ConsumerGroupHeartbeatResponse {
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(gid("k"))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(60_000)
        .with_subscribed_topic_names((epoch == 0).then(|| vec![name("t")]))
        .with_topic_partitions(owned);
    c.send(ApiKey::ConsumerGroupHeartbeat, 1, &req)
}

/// A KIP-848 member (group.protocol=consumer) keeps its epoch and partitions across a
/// kill -9 of the broker: the group's records are stored, and the restarted coordinator
/// takes the member's next heartbeat as if nothing happened (no rejoin, no rebalance).
#[test]
fn a_consumer_group_member_keeps_its_epoch_and_partitions_across_kill_9() {
    let mut b = Broker::start();
    let mut c = b.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("t", 3, &[]), 0);
    let joined = consumer_heartbeat(&mut c, "member-1", 0, None);
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    let epoch = joined.member_epoch;
    let owned: Vec<consumer_group_heartbeat_request::TopicPartitions> = joined
        .assignment
        .expect("an assignment on joining")
        .topic_partitions
        .into_iter()
        .map(|t| {
            consumer_group_heartbeat_request::TopicPartitions::default()
                .with_topic_id(t.topic_id)
                .with_partitions(t.partitions)
        })
        .collect();
    assert_eq!(owned[0].partitions.len(), 3);
    let steady = consumer_heartbeat(&mut c, "member-1", epoch, Some(owned.clone()));
    assert_eq!((steady.error_code, steady.member_epoch), (0, epoch));

    b.kill9();
    b.restart();
    let mut c = b.client();
    c.await_group_coordinator();
    let after = consumer_heartbeat(&mut c, "member-1", epoch, Some(owned));
    assert_eq!(
        (after.error_code, after.member_epoch),
        (0, epoch),
        "the restarted coordinator knows the member: {:?}",
        after.error_message
    );
    let d: ConsumerGroupDescribeResponse = c.send(
        ApiKey::ConsumerGroupDescribe,
        0,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![gid("k")]),
    );
    let g = &d.groups[0];
    assert_eq!((g.error_code, g.group_epoch), (0, epoch));
    assert_eq!(g.group_state.as_str(), "Stable");
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.members[0].member_epoch, epoch);
    assert_eq!(
        g.members[0].assignment.topic_partitions[0].partitions.len(),
        3
    );
}
