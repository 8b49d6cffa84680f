//! Share groups (KIP-932) against a real broker process: the `share.version` switch, a
//! member joining and being assigned, records acquired by one member at a time, the
//! acknowledgement types, lock expiry and a closed connection giving records back, and
//! Kafka's error codes for bad share requests (each leaving the broker serving).

mod common;

use std::time::{Duration, Instant};

use common::share::{
    acquired, heartbeat, renew_ack, renew_fetch, share_ack, share_fetch, topic_id,
};
use common::{batch, Broker, Client};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// UpdateFeatures of `share.version` to `level` (upgrade type 1 upgrade, 2 safe downgrade).
fn set_share_version(c: &mut Client, level: i16, upgrade_type: i8) {
    let req = UpdateFeaturesRequest::default()
        .with_timeout_ms(30_000)
        .with_feature_updates(vec![update_features_request::FeatureUpdateKey::default()
            .with_feature(s("share.version"))
            .with_max_version_level(level)
            .with_upgrade_type(upgrade_type)]);
    let r: UpdateFeaturesResponse = c.send(ApiKey::UpdateFeatures, 1, &req);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
}

fn partition_codes(r: &ShareFetchResponse) -> Vec<(i16, i16)> {
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| (p.error_code, p.acknowledge_error_code))
        .collect()
}

/// A broker (share groups are on in a new cluster), a one-partition topic and two members of
/// group `g` assigned it.
fn setup(overrides: &[&str], topic: &str) -> (Broker, Client, Uuid) {
    let b = Broker::start_with(overrides);
    let mut c = b.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic(topic, 1, &[]), 0);
    let id = topic_id(&mut c, topic);
    for m in ["member-a", "member-b"] {
        let r = heartbeat(&mut c, "g", m, 0, Some(&[topic]));
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        let a = r.assignment.expect("assigned on joining");
        assert_eq!(a.topic_partitions[0].topic_id, id);
        assert_eq!(a.topic_partitions[0].partitions, [0]);
    }
    (b, c, id)
}

/// A new cluster serves share groups (`share.version` 1, as Kafka 4.2+); a downgrade to 0
/// switches them off (unlisted in ApiVersions, UNSUPPORTED_VERSION) and an upgrade back on.
#[test]
fn share_groups_are_switched_by_share_version() {
    let b = Broker::start();
    let mut c = b.client();
    c.await_group_coordinator();
    let listed = |c: &mut Client| {
        let r: ApiVersionsResponse = c.send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        r.api_keys
            .iter()
            .any(|k| k.api_key == ApiKey::ShareFetch as i16)
    };
    assert!(listed(&mut c));
    assert_eq!(c.create_topic("t", 1, &[]), 0);
    let r = heartbeat(&mut c, "g", "m", 0, Some(&["t"]));
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(r.member_epoch, 1);

    set_share_version(&mut c, 0, 2);
    assert!(!listed(&mut c));
    let r = heartbeat(&mut c, "g", "m2", 0, Some(&["t"]));
    assert_eq!(r.error_code, ResponseError::UnsupportedVersion.code());

    set_share_version(&mut c, 1, 1);
    assert!(listed(&mut c));
    let r = heartbeat(&mut c, "g", "m2", 0, Some(&["t"]));
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
}

/// Two members on one partition: each record goes to one of them, ACCEPT finishes it,
/// RELEASE gives it to the next fetch with its delivery count up, REJECT never again.
#[test]
fn members_acquire_records_one_at_a_time() {
    let (b, mut c, t) = setup(&[], "queue");
    let mut a = b.client();
    let mut bb = b.client();
    // Nothing yet: the share partition started at the end of the (empty) log.
    let r = share_fetch(&mut a, "g", "member-a", 0, t, &[], 0);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert!(acquired(&r).is_empty());
    let r = share_fetch(&mut bb, "g", "member-b", 0, t, &[], 0);
    assert_eq!(r.error_code, 0);

    assert_eq!(c.produce("queue", 0, batch(&["a", "b", "c"]), -1).0, 0);
    assert_eq!(c.produce("queue", 0, batch(&["d", "e"]), -1).0, 0);
    let r = share_fetch(&mut a, "g", "member-a", 1, t, &[], 5000);
    assert_eq!(acquired(&r), [(0, 4, 1)]);
    let p = &r.responses[0].partitions[0];
    assert_eq!(common::records(p.records.clone().unwrap()).len(), 5);
    assert!(r.acquisition_lock_timeout_ms > 0);
    // member-b finds nothing free while member-a holds them.
    let r = share_fetch(&mut bb, "g", "member-b", 1, t, &[], 200);
    assert!(acquired(&r).is_empty(), "{:?}", acquired(&r));

    // member-b cannot acknowledge member-a's records: INVALID_RECORD_STATE.
    let r = share_ack(&mut bb, "g", "member-b", 2, t, &[(0, 0, &[1])]);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::InvalidRecordState.code()
    );

    // ACCEPT a and b, RELEASE c, REJECT d, ACCEPT e (one type per offset).
    let r = share_ack(&mut a, "g", "member-a", 2, t, &[(0, 4, &[1, 1, 2, 3, 1])]);
    assert_eq!(r.error_code, 0);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    // MaxBytes 0 fetches nothing, though c is free, as in Kafka (librdkafka's 0180).
    let req = common::share::fetch_request("g", "member-b", 3, t, &[])
        .with_max_wait_ms(200)
        .with_max_bytes(0)
        .with_max_records(500);
    let r: ShareFetchResponse = bb.send(ApiKey::ShareFetch, 1, &req);
    assert_eq!(r.error_code, 0);
    assert!(acquired(&r).is_empty(), "{:?}", acquired(&r));
    let r = share_fetch(&mut bb, "g", "member-b", 4, t, &[], 5000);
    assert_eq!(acquired(&r), [(2, 2, 2)]);
    // Accepting it with the next fetch finishes the partition's records.
    let r = share_fetch(&mut bb, "g", "member-b", 5, t, &[(2, 2, &[1])], 200);
    assert_eq!(partition_codes(&r), [(0, 0)]);
    assert!(acquired(&r).is_empty());
    let r = share_fetch(&mut a, "g", "member-a", 3, t, &[], 200);
    assert!(acquired(&r).is_empty(), "{:?}", acquired(&r));

    // member-a's connection closes while it holds a record (locked for 30 s): member-b
    // gets it at once, delivered a second time.
    assert_eq!(c.produce("queue", 0, batch(&["f"]), -1).0, 0);
    let r = share_fetch(&mut a, "g", "member-a", 4, t, &[], 5000);
    assert_eq!(acquired(&r), [(5, 5, 1)]);
    drop(a);
    let r = share_fetch(&mut bb, "g", "member-b", 6, t, &[], 10_000);
    assert_eq!(acquired(&r), [(5, 5, 2)]);
}

/// One member reads two partitions through one session: while partition 0 has more records
/// than an answer takes, partition 1's records still come, as Kafka turns the session's
/// partitions round by the request's epoch.
#[test]
fn a_backlog_on_one_partition_does_not_starve_another() {
    let b = Broker::start();
    let mut c = b.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("two", 2, &[]), 0);
    let t = topic_id(&mut c, "two");
    let r = heartbeat(&mut c, "g", "m", 0, Some(&["two"]));
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let both = |epoch: i32, wait: i32| {
        let mut req = common::share::fetch_request("g", "m", epoch, t, &[])
            .with_max_wait_ms(wait)
            .with_max_bytes(1 << 20)
            .with_max_records(1);
        let p1 = req.topics[0].partitions[0].clone().with_partition_index(1);
        req.topics[0].partitions.push(p1);
        req
    };
    let mut m = b.client();
    let r: ShareFetchResponse = m.send(ApiKey::ShareFetch, 1, &both(0, 0));
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    for v in ["a", "b", "c", "d"] {
        assert_eq!(c.produce("two", 0, batch(&[v]), -1).0, 0);
    }
    assert_eq!(c.produce("two", 1, batch(&["z"]), -1).0, 0);
    // One record per answer (MaxRecords 1, one-record batches), each held 30 s: two answers
    // take one record of each partition, whichever comes first.
    let mut from = Vec::new();
    for epoch in 1..=2 {
        let r: ShareFetchResponse = m.send(ApiKey::ShareFetch, 1, &both(epoch, 5000));
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        for p in &r.responses[0].partitions {
            if !p.acquired_records.is_empty() {
                from.push(p.partition_index);
            }
        }
    }
    from.sort();
    assert_eq!(from, [0, 1], "partitions that gave records, one per answer");
}

/// A lock that runs out gives the records back.
#[test]
fn expired_locks_give_records_back() {
    let (b, mut c, t) = setup(&["group.share.record.lock.duration.ms=1000"], "locks");
    let mut a = b.client();
    share_fetch(&mut a, "g", "member-a", 0, t, &[], 0);
    assert_eq!(c.produce("locks", 0, batch(&["x", "y"]), -1).0, 0);
    let r = share_fetch(&mut a, "g", "member-a", 1, t, &[], 5000);
    assert_eq!(acquired(&r), [(0, 1, 1)]);
    assert_eq!(r.acquisition_lock_timeout_ms, 1000);
    // member-a sits on them past the lock: member-b gets them, delivered a second time.
    let mut bb = b.client();
    share_fetch(&mut bb, "g", "member-b", 0, t, &[], 0);
    let mut epoch = 1;
    let deadline = Instant::now() + Duration::from_secs(30);
    let got = loop {
        let r = share_fetch(&mut bb, "g", "member-b", epoch, t, &[], 500);
        epoch += 1;
        let got = acquired(&r);
        if !got.is_empty() || Instant::now() > deadline {
            break got;
        }
    };
    assert_eq!(got, [(0, 1, 2)]);
    // member-a's late acknowledgement is refused: the records are no longer its.
    let r = share_ack(&mut a, "g", "member-a", 2, t, &[(0, 1, &[1])]);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::InvalidRecordState.code()
    );
}

/// KIP-1222 (ShareFetch and ShareAcknowledge v2): renew requests keep a member's records
/// locked well past the lock duration and fetch nothing; RENEW outside a renew request, a
/// renew ShareFetch that asks for records, and renewals in a group that switched them off
/// are refused with Kafka's codes.
#[test]
fn renew_requests_keep_records_locked() {
    let (b, mut c, t) = setup(&["group.share.record.lock.duration.ms=3000"], "renew");
    let mut a = b.client();
    share_fetch(&mut a, "g", "member-a", 0, t, &[], 0);
    assert_eq!(c.produce("renew", 0, batch(&["x", "y"]), -1).0, 0);
    let r = share_fetch(&mut a, "g", "member-a", 1, t, &[], 5000);
    assert_eq!(acquired(&r), [(0, 1, 1)]);
    // RENEW in a request that is not a renew request.
    let r = share_ack(&mut a, "g", "member-a", 2, t, &[(0, 1, &[4])]);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::InvalidRequest.code()
    );
    // A renew ShareFetch that would wait for records.
    let r = renew_fetch(&mut a, "g", "member-a", 3, t, &[(0, 1, &[4])], 500);
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());

    // member-b polls for three lock durations while member-a renews, by turns with
    // ShareAcknowledge and ShareFetch v2, about every 500 ms.
    let mut bb = b.client();
    share_fetch(&mut bb, "g", "member-b", 0, t, &[], 0);
    let (mut ea, mut eb) = (3, 1);
    let until = Instant::now() + Duration::from_secs(9);
    while Instant::now() < until {
        if ea % 2 == 0 {
            let r = renew_ack(&mut a, "g", "member-a", ea, t, &[(0, 1, &[4])]);
            assert_eq!(r.response.error_code, 0);
            assert_eq!(r.response.responses[0].partitions[0].error_code, 0);
            assert_eq!(r.acquisition_lock_timeout_ms, 3000);
        } else {
            let r = renew_fetch(&mut a, "g", "member-a", ea, t, &[(0, 1, &[4])], 0);
            assert_eq!(r.error_code, 0, "{:?}", r.error_message);
            assert_eq!(partition_codes(&r), [(0, 0)]);
            assert!(acquired(&r).is_empty());
        }
        ea += 1;
        let r = share_fetch(&mut bb, "g", "member-b", eb, t, &[], 500);
        eb += 1;
        assert!(acquired(&r).is_empty(), "member-b got {:?}", acquired(&r));
    }
    let r = share_ack(&mut a, "g", "member-a", ea, t, &[(0, 1, &[1])]);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    ea += 1;

    // A group with share.renew.acknowledge.enable=false: INVALID_RECORD_STATE.
    assert_eq!(
        alter_group_configs(
            &mut c,
            "g",
            &[("share.renew.acknowledge.enable", 0, Some("false"))],
            false
        )
        .0,
        0
    );
    assert_eq!(c.produce("renew", 0, batch(&["z"]), -1).0, 0);
    let r = share_fetch(&mut a, "g", "member-a", ea, t, &[], 5000);
    assert_eq!(acquired(&r), [(2, 2, 1)]);
    let r = renew_ack(&mut a, "g", "member-a", ea + 1, t, &[(2, 2, &[4])]);
    assert_eq!(
        r.response.responses[0].partitions[0].error_code,
        ResponseError::InvalidRecordState.code()
    );
}

/// Bad share requests get Kafka's error codes, and the broker keeps serving.
#[test]
fn bad_share_requests_are_refused() {
    let (b, mut c, t) = setup(&[], "bad");
    let mut a = b.client();
    // No session yet / the wrong epoch.
    let r = share_fetch(&mut a, "g", "member-a", 3, t, &[], 0);
    assert_eq!(r.error_code, ResponseError::ShareSessionNotFound.code());
    let r = share_ack(&mut a, "g", "member-a", 1, t, &[(0, 0, &[1])]);
    assert_eq!(r.error_code, ResponseError::ShareSessionNotFound.code());
    let r = share_fetch(&mut a, "g", "member-a", 0, t, &[], 0);
    assert_eq!(r.error_code, 0);
    let r = share_fetch(&mut a, "g", "member-a", 5, t, &[], 0);
    assert_eq!(r.error_code, ResponseError::InvalidShareSessionEpoch.code());
    // Acknowledgements in the request that opens a session.
    let r = share_fetch(&mut a, "g", "member-a", 0, t, &[(0, 0, &[1])], 0);
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    // An unknown acknowledge type, and first after last.
    share_fetch(&mut a, "g", "member-a", 0, t, &[], 0);
    assert_eq!(c.produce("bad", 0, batch(&["x"]), -1).0, 0);
    let r = share_fetch(&mut a, "g", "member-a", 1, t, &[], 5000);
    assert_eq!(acquired(&r), [(0, 0, 1)]);
    let r = share_ack(&mut a, "g", "member-a", 2, t, &[(0, 0, &[9])]);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::InvalidRequest.code()
    );
    let r = share_ack(&mut a, "g", "member-a", 3, t, &[(1, 0, &[1])]);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::InvalidRequest.code()
    );
    // None of that changed the record's state: it is still member-a's to accept.
    let r = share_ack(&mut a, "g", "member-a", 4, t, &[(0, 0, &[1])]);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);

    // Heartbeats: a stale epoch, an unknown member, a member id over 36 characters, a
    // group id that belongs to a consumer group.
    let r = heartbeat(&mut c, "g", "member-a", 9, None);
    assert_eq!(r.error_code, ResponseError::FencedMemberEpoch.code());
    let r = heartbeat(&mut c, "g", "nobody", 3, None);
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    let r = heartbeat(&mut c, "g", &"x".repeat(37), 0, Some(&["bad"]));
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    let r = heartbeat(&mut c, "g", "member-c", 0, None);
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    let cg = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("cg")))
        .with_member_id(s("m1"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![common::name("bad")]))
        .with_topic_partitions(Some(vec![]));
    let r: ConsumerGroupHeartbeatResponse = c.send(ApiKey::ConsumerGroupHeartbeat, 1, &cg);
    assert_eq!(r.error_code, 0);
    let r = heartbeat(&mut c, "cg", "member-x", 0, Some(&["bad"]));
    assert_eq!(r.error_code, ResponseError::GroupIdNotFound.code());
    // And the share group cannot be joined as a consumer group.
    let cg = cg.with_group_id(GroupId(s("g")));
    let r: ConsumerGroupHeartbeatResponse = c.send(ApiKey::ConsumerGroupHeartbeat, 1, &cg);
    assert_eq!(r.error_code, ResponseError::GroupIdNotFound.code());

    // The broker still serves: the group is described with its two members.
    let r: ShareGroupDescribeResponse = c.send(
        ApiKey::ShareGroupDescribe,
        1,
        &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("g"))]),
    );
    assert_eq!(r.groups[0].error_code, 0);
    assert_eq!(r.groups[0].members.len(), 2);
    assert_eq!(r.groups[0].group_state.as_str(), "Stable");
}

/// Acknowledged and rejected records stay done across a crash, and records that were
/// acquired come back with their delivery counts: the share partition's state is read back
/// from `__share_group_state`.
#[test]
fn share_state_survives_a_crash() {
    let (mut b, mut c, t) = setup(&[], "durable");
    let mut a = b.client();
    share_fetch(&mut a, "g", "member-a", 0, t, &[], 0);
    assert_eq!(
        c.produce("durable", 0, batch(&["0", "1", "2", "3"]), -1).0,
        0
    );
    let r = share_fetch(&mut a, "g", "member-a", 1, t, &[], 5000);
    assert_eq!(acquired(&r), [(0, 3, 1)]);
    // ACCEPT 0 and 1, REJECT 2; 3 stays acquired when the broker dies.
    let r = share_ack(&mut a, "g", "member-a", 2, t, &[(0, 2, &[1, 1, 3])]);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    drop(a);
    b.kill9();
    b.restart();
    let mut c = b.client();
    c.await_group_coordinator();
    // The group is still there with its members (persisted in __consumer_offsets): member-a
    // carries on at the epoch it had (1: it joined first), and is sent its assignment.
    let d: ShareGroupDescribeResponse = c.send(
        ApiKey::ShareGroupDescribe,
        1,
        &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("g"))]),
    );
    let g = &d.groups[0];
    assert_eq!((g.error_code, g.group_state.as_str()), (0, "Stable"));
    let mut members: Vec<_> = g.members.iter().map(|m| m.member_id.to_string()).collect();
    members.sort();
    assert_eq!(members, ["member-a", "member-b"]);
    let r = heartbeat(&mut c, "g", "member-a", 1, None);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert!(r.assignment.is_some());
    let mut a = b.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut epoch = 0;
    let got = loop {
        let r = share_fetch(&mut a, "g", "member-a", epoch, t, &[], 500);
        if r.error_code == 0 {
            epoch += 1;
        }
        let got = acquired(&r);
        if !got.is_empty() || Instant::now() > deadline {
            break got;
        }
    };
    // Only 3, delivered a second time; 0..2 are never delivered again.
    assert_eq!(got, [(3, 3, 2)]);
    let r = share_ack(&mut a, "g", "member-a", epoch, t, &[(3, 3, &[1])]);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    assert_eq!(c.produce("durable", 0, batch(&["4"]), -1).0, 0);
    let r = share_fetch(&mut a, "g", "member-a", epoch + 1, t, &[], 5000);
    assert_eq!(acquired(&r), [(4, 4, 1)]);
}

fn state_key_coordinator(c: &mut Client, key: &str) -> i16 {
    let r: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        6,
        &FindCoordinatorRequest::default()
            .with_key_type(2)
            .with_coordinator_keys(vec![s(key)]),
    );
    r.coordinators[0].error_code
}

fn write_state(
    c: &mut Client,
    topic: Uuid,
    leader_epoch: i32,
    start: i64,
    batches: &[(i64, i64, i8, i16)],
) -> i16 {
    use write_share_group_state_request::{PartitionData, StateBatch, WriteStateData};
    let req = WriteShareGroupStateRequest::default()
        .with_group_id(s("sg"))
        .with_topics(vec![WriteStateData::default()
            .with_topic_id(topic)
            .with_partitions(vec![PartitionData::default()
                .with_partition(0)
                .with_leader_epoch(leader_epoch)
                .with_start_offset(start)
                .with_state_batches(
                    batches
                        .iter()
                        .map(|&(f, l, st, n)| {
                            StateBatch::default()
                                .with_first_offset(f)
                                .with_last_offset(l)
                                .with_delivery_state(st)
                                .with_delivery_count(n)
                        })
                        .collect(),
                )])]);
    let r: WriteShareGroupStateResponse = c.send(ApiKey::WriteShareGroupState, 0, &req);
    r.results[0].partitions[0].error_code
}

fn read_state(
    c: &mut Client,
    topic: Uuid,
    leader_epoch: i32,
) -> read_share_group_state_response::PartitionResult {
    use read_share_group_state_request::{PartitionData, ReadStateData};
    let req = ReadShareGroupStateRequest::default()
        .with_group_id(s("sg"))
        .with_topics(vec![ReadStateData::default()
            .with_topic_id(topic)
            .with_partitions(vec![PartitionData::default()
                .with_partition(0)
                .with_leader_epoch(leader_epoch)])]);
    let r: ReadShareGroupStateResponse = c.send(ApiKey::ReadShareGroupState, 0, &req);
    r.results[0].partitions[0].clone()
}

/// The share coordinator's RPCs, as another broker sends them: FindCoordinator key type 2
/// names the coordinator, writes merge, a newer leader's read fences the older leader, a
/// malformed batch is refused, and delete removes the state.
#[test]
fn share_coordinator_keeps_merges_and_fences() {
    let b = Broker::start();
    let mut c = b.client();
    c.await_group_coordinator();
    let t = Uuid::from_u128(42);
    let key = format!("sg:{t}:0");
    // The first lookup creates __share_group_state; its partitions then load.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = state_key_coordinator(&mut c, &key);
        if found == 0 && write_state(&mut c, t, 5, 10, &[(10, 14, 0, 1)]) == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no share coordinator: {found}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // 11..12 acknowledged: the stored run splits around it.
    assert_eq!(write_state(&mut c, t, 5, -1, &[(11, 12, 2, 1)]), 0);
    let p = read_state(&mut c, t, 6);
    assert_eq!((p.error_code, p.start_offset), (0, 10));
    let runs: Vec<_> = p
        .state_batches
        .iter()
        .map(|b| {
            (
                b.first_offset,
                b.last_offset,
                b.delivery_state,
                b.delivery_count,
            )
        })
        .collect();
    assert_eq!(runs, [(10, 10, 0, 1), (11, 12, 2, 1), (13, 14, 0, 1)]);
    // Leader epoch 6 read it: epoch 5's writes and reads are fenced.
    assert_eq!(
        write_state(&mut c, t, 5, 11, &[]),
        ResponseError::FencedLeaderEpoch.code()
    );
    assert_eq!(
        read_state(&mut c, t, 5).error_code,
        ResponseError::FencedLeaderEpoch.code()
    );
    assert_eq!(
        write_state(&mut c, t, 6, 11, &[(20, 19, 0, 1)]),
        ResponseError::InvalidRequest.code()
    );
    let r: ReadShareGroupStateSummaryResponse = c.send(
        ApiKey::ReadShareGroupStateSummary,
        0,
        &ReadShareGroupStateSummaryRequest::default()
            .with_group_id(s("sg"))
            .with_topics(vec![
                read_share_group_state_summary_request::ReadStateSummaryData::default()
                    .with_topic_id(t)
                    .with_partitions(vec![
                        read_share_group_state_summary_request::PartitionData::default()
                            .with_partition(0),
                    ]),
            ]),
    );
    let p = &r.results[0].partitions[0];
    assert_eq!((p.error_code, p.start_offset, p.leader_epoch), (0, 10, 6));
    let r: DeleteShareGroupStateResponse = c.send(
        ApiKey::DeleteShareGroupState,
        0,
        &DeleteShareGroupStateRequest::default()
            .with_group_id(s("sg"))
            .with_topics(vec![
                delete_share_group_state_request::DeleteStateData::default()
                    .with_topic_id(t)
                    .with_partitions(vec![
                        delete_share_group_state_request::PartitionData::default()
                            .with_partition(0),
                    ]),
            ]),
    );
    assert_eq!(r.results[0].partitions[0].error_code, 0);
    let p = read_state(&mut c, t, 7);
    assert_eq!((p.error_code, p.start_offset), (0, -1));
    assert!(p.state_batches.is_empty());
}

fn describe_group_configs(c: &mut Client, group: &str) -> Vec<(String, String, i8)> {
    common::describe_configs(c, 32, group)
        .into_iter()
        .map(|(name, value, source, _)| (name, value, source))
        .collect()
}

fn config_of(configs: &[(String, String, i8)], name: &str) -> (String, i8) {
    let (_, v, source) = configs
        .iter()
        .find(|(n, _, _)| n == name)
        .unwrap_or_else(|| panic!("{name} not described"));
    (v.clone(), *source)
}

/// IncrementalAlterConfigs on group `group`: (name, op, value); the error code and message.
fn alter_group_configs(
    c: &mut Client,
    group: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> (i16, Option<String>) {
    common::alter_configs(c, 32, group, ops, validate_only)
}

/// A group's configs (`kafka-configs --entity-type groups`) are described over the broker's
/// defaults, checked against its bounds, kept across a restart, and steer the share group:
/// `share.auto.offset.reset=earliest` starts it at the log start and
/// `share.record.lock.duration.ms` sets its locks.
#[test]
fn group_configs_steer_a_share_group() {
    let mut b = Broker::start_with(&["group.share.min.record.lock.duration.ms=1000"]);
    let mut c = b.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("backlog", 1, &[]), 0);
    let t = topic_id(&mut c, "backlog");
    assert_eq!(c.produce("backlog", 0, batch(&["a", "b", "c"]), -1).0, 0);

    let d = describe_group_configs(&mut c, "g");
    assert_eq!(
        config_of(&d, "share.auto.offset.reset"),
        ("latest".into(), 5)
    );
    assert_eq!(
        config_of(&d, "share.record.lock.duration.ms"),
        ("30000".into(), 5)
    );

    // Refused: out of the broker's bounds, not a group config, not a value, a list op.
    for (ops, what) in [
        (
            vec![("share.delivery.count.limit", 0, Some("11"))],
            "group.share.max.delivery.count.limit",
        ),
        (
            vec![("share.record.lock.duration.ms", 0, Some("999"))],
            "group.share.min.record.lock.duration.ms",
        ),
        (vec![("no.such.config", 0, Some("1"))], "no.such.config"),
        (
            vec![("share.auto.offset.reset", 0, Some("by_duration:yesterday"))],
            "share.auto.offset.reset",
        ),
        (
            vec![("share.isolation.level", 2, Some("read_committed"))],
            "not a list",
        ),
    ] {
        let (code, msg) = alter_group_configs(&mut c, "g", &ops, false);
        assert_eq!(code, ResponseError::InvalidConfig.code(), "{ops:?}");
        assert!(msg.as_deref().unwrap_or("").contains(what), "{msg:?}");
    }
    // validate_only changes nothing.
    let set = [
        ("share.auto.offset.reset", 0, Some("earliest")),
        ("share.record.lock.duration.ms", 0, Some("2000")),
    ];
    assert_eq!(alter_group_configs(&mut c, "g", &set, true).0, 0);
    let d = describe_group_configs(&mut c, "g");
    assert_eq!(
        config_of(&d, "share.auto.offset.reset"),
        ("latest".into(), 5)
    );
    assert_eq!(alter_group_configs(&mut c, "g", &set, false).0, 0);

    // Kept by the metadata quorum across a restart.
    b.kill9();
    b.restart();
    let mut c = b.client();
    c.await_group_coordinator();
    let d = describe_group_configs(&mut c, "g");
    assert_eq!(
        config_of(&d, "share.auto.offset.reset"),
        ("earliest".into(), 8)
    );
    assert_eq!(
        config_of(&d, "share.record.lock.duration.ms"),
        ("2000".into(), 8)
    );

    // The group starts at the log start, and its locks last 2 s.
    let r = heartbeat(&mut c, "g", "member-a", 0, Some(&["backlog"]));
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let mut a = b.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut epoch = 0;
    let r = loop {
        let r = share_fetch(&mut a, "g", "member-a", epoch, t, &[], 500);
        if r.error_code == 0 {
            epoch += 1;
        }
        if !acquired(&r).is_empty() || Instant::now() > deadline {
            break r;
        }
    };
    assert_eq!(acquired(&r), [(0, 2, 1)]);
    assert_eq!(r.acquisition_lock_timeout_ms, 2000);

    // DELETE gives the broker's default back.
    let del = [("share.auto.offset.reset", 1, None)];
    assert_eq!(alter_group_configs(&mut c, "g", &del, false).0, 0);
    let d = describe_group_configs(&mut c, "g");
    assert_eq!(
        config_of(&d, "share.auto.offset.reset"),
        ("latest".into(), 5)
    );
    assert_eq!(
        config_of(&d, "share.record.lock.duration.ms"),
        ("2000".into(), 8)
    );
}

fn alter_share_offsets(
    c: &mut Client,
    group: &str,
    topic: &str,
    starts: &[(i32, i64)],
) -> AlterShareGroupOffsetsResponse {
    use alter_share_group_offsets_request::*;
    let req = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
            .with_topic_name(common::name(topic))
            .with_partitions(
                starts
                    .iter()
                    .map(|(p, o)| {
                        AlterShareGroupOffsetsRequestPartition::default()
                            .with_partition_index(*p)
                            .with_start_offset(*o)
                    })
                    .collect(),
            )]);
    c.send(ApiKey::AlterShareGroupOffsets, 0, &req)
}

/// The group's start offsets as DescribeShareGroupOffsets shows every partition it read.
fn share_starts(c: &mut Client, group: &str) -> Vec<(String, i32, i64)> {
    use describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(None),
    ]);
    let r: DescribeShareGroupOffsetsResponse = c.send(ApiKey::DescribeShareGroupOffsets, 0, &req);
    assert_eq!(r.groups[0].error_code, 0, "{:?}", r.groups[0].error_message);
    r.groups[0]
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.topic_name.to_string(), p.partition_index, p.start_offset))
        })
        .collect()
}

/// Fetches as `member` (a new share session) until something is acquired or 30 s pass.
fn first_acquired(b: &Broker, member: &str, t: Uuid) -> Vec<(i64, i64, i16)> {
    let mut a = b.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut epoch = 0;
    loop {
        let r = share_fetch(&mut a, "g", member, epoch, t, &[], 500);
        if r.error_code == 0 {
            epoch += 1;
        }
        let got = acquired(&r);
        if !got.is_empty() || Instant::now() > deadline {
            return got;
        }
    }
}

/// kafka-share-groups --reset-offsets and --delete-offsets: AlterShareGroupOffsets sets
/// where an empty share group starts (creating the group if need be), refused while it has
/// members; DeleteShareGroupOffsets makes it start over from share.auto.offset.reset.
#[test]
fn share_group_offsets_are_altered_and_deleted() {
    let b = Broker::start();
    let mut c = b.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("reset", 1, &[]), 0);
    let t = topic_id(&mut c, "reset");
    assert_eq!(
        c.produce("reset", 0, batch(&["0", "1", "2", "3", "4"]), -1)
            .0,
        0
    );

    // No group yet: it is created empty, starting at 2; a missing partition is refused.
    let r = alter_share_offsets(&mut c, "g", "reset", &[(0, 2), (7, 0)]);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let parts: Vec<(i32, i16)> = r.responses[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code))
        .collect();
    assert_eq!(
        parts,
        [(0, 0), (7, ResponseError::UnknownTopicOrPartition.code())]
    );
    assert_eq!(share_starts(&mut c, "g"), [("reset".to_string(), 0, 2)]);

    let r = heartbeat(&mut c, "g", "member-a", 0, Some(&["reset"]));
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(first_acquired(&b, "member-a", t), [(2, 4, 1)]);
    // A member holds the group: no changes to its offsets.
    let r = alter_share_offsets(&mut c, "g", "reset", &[(0, 0)]);
    assert_eq!(r.error_code, ResponseError::NonEmptyGroup.code());

    // Once it left, back to 0: the records are delivered again, as new ones.
    let r = heartbeat(&mut c, "g", "member-a", -1, None);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let r = alter_share_offsets(&mut c, "g", "reset", &[(0, 0)]);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(share_starts(&mut c, "g"), [("reset".to_string(), 0, 0)]);
    let r = heartbeat(&mut c, "g", "member-b", 0, Some(&["reset"]));
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(first_acquired(&b, "member-b", t), [(0, 4, 1)]);

    // Deleted: the group starts over at the end of the log (share.auto.offset.reset).
    let r = heartbeat(&mut c, "g", "member-b", -1, None);
    assert_eq!(r.error_code, 0);
    let req = DeleteShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_topics(vec![
            delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                .with_topic_name(common::name("reset")),
            delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                .with_topic_name(common::name("nope")),
        ]);
    let r: DeleteShareGroupOffsetsResponse = c.send(ApiKey::DeleteShareGroupOffsets, 0, &req);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let codes: Vec<i16> = r.responses.iter().map(|t| t.error_code).collect();
    assert_eq!(codes, [0, ResponseError::UnknownTopicOrPartition.code()]);
    assert_eq!(share_starts(&mut c, "g"), []);
    let r = heartbeat(&mut c, "g", "member-c", 0, Some(&["reset"]));
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(c.produce("reset", 0, batch(&["5"]), -1).0, 0);
    assert_eq!(first_acquired(&b, "member-c", t), [(5, 5, 1)]);

    // A consumer group's id is not a share group's.
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("classic")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(common::name("reset"))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1),
                ]),
        ]);
    let r: OffsetCommitResponse = c.send(ApiKey::OffsetCommit, 8, &commit);
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let r = alter_share_offsets(&mut c, "classic", "reset", &[(0, 0)]);
    assert_eq!(r.error_code, ResponseError::GroupIdNotFound.code());
}

/// Share groups' metrics: acknowledgements by type, records delivered again, and the
/// share partition's records in flight and acquired now.
#[test]
fn share_metrics_count_what_happened() {
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{}", common::free_port())
        .parse()
        .unwrap();
    let listener = format!("metrics.listener={metrics}");
    let (b, mut c, t) = setup(&[listener.as_str()], "metered");
    let mut a = b.client();
    let mut bb = b.client();
    share_fetch(&mut a, "g", "member-a", 0, t, &[], 0);
    share_fetch(&mut bb, "g", "member-b", 0, t, &[], 0);
    assert_eq!(
        c.produce("metered", 0, batch(&["0", "1", "2", "3"]), -1).0,
        0
    );
    let r = share_fetch(&mut a, "g", "member-a", 1, t, &[], 5000);
    assert_eq!(acquired(&r), [(0, 3, 1)]);
    // ACCEPT 0 and 3, RELEASE 1, REJECT 2; member-b gets 1 again.
    let r = share_ack(&mut a, "g", "member-a", 2, t, &[(0, 3, &[1, 2, 3, 1])]);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let r = share_fetch(&mut bb, "g", "member-b", 1, t, &[], 5000);
    assert_eq!(acquired(&r), [(1, 1, 2)]);

    let (status, text) = common::http_get(metrics, "/metrics");
    assert_eq!(status, 200);
    let value = |name: &str, labels: &[(&str, &str)]| {
        common::metric_value(&text, name, labels)
            .unwrap_or_else(|| panic!("{name} {labels:?} missing"))
    };
    let at = [("group", "g"), ("topic", "metered")];
    let acks = "kafka_server_sharegroupmetrics_recordacknowledgements_total";
    for (kind, n) in [
        ("accept", 2.0),
        ("release", 1.0),
        ("reject", 1.0),
        ("renew", 0.0),
    ] {
        assert_eq!(value(acks, &[at[0], at[1], ("acktype", kind)]), n, "{kind}");
    }
    assert_eq!(value("cairn_share_records_redelivered_total", &at), 1.0);
    assert_eq!(
        value(
            "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total",
            &at
        ),
        0.0
    );
    let p0 = [at[0], at[1], ("partition", "0")];
    assert_eq!(value("cairn_share_partition_acquired_records", &p0), 1.0);
    assert!(
        value(
            "kafka_server_sharepartitionmetrics_inflightmessagecount",
            &p0
        ) >= 1.0
    );
}
