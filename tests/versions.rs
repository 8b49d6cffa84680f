//! Every API the broker advertises, at every version it advertises, with a request that
//! touches a real topic: the response must decode at that version and carry no error.
//! This is what catches a response field that exists only in newer versions being set for
//! an older one (kafka-protocol then refuses to encode it and the connection closes).

mod common;

use common::{batch, name, Broker, Client};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn topic_id(c: &mut Client, topic: &str) -> uuid::Uuid {
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name(topic)))
    ]));
    let r: MetadataResponse = c.send(ApiKey::Metadata, 12, &req);
    r.topics[0].topic_id
}

fn advertised(c: &mut Client) -> Vec<ApiVersion> {
    let r: ApiVersionsResponse = c.send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(r.error_code, 0);
    r.api_keys
}

/// Sends one representative request of `api` at `v` and checks the answer; returns what was
/// checked, for the failure message of the caller.
fn exercise(c: &mut Client, api: ApiKey, v: i16) {
    let at = format!("{api:?} v{v}");
    match api {
        ApiKey::Produce => {
            let mut req = Client::produce_request("t", 0, batch(&["x"]), 1);
            if v >= 13 {
                // KIP-516: the topic by id only
                req.topic_data[0].topic_id = topic_id(c, "t");
                req.topic_data[0].name = Default::default();
            }
            let r: ProduceResponse = c.send(api, v, &req);
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(p.error_code, 0, "{at}");
            assert!(p.base_offset >= 1, "{at}");
            if v >= 13 {
                assert_eq!(r.responses[0].topic_id, topic_id(c, "t"), "{at}");
                req.topic_data[0].topic_id = uuid::Uuid::from_u128(7);
                let r: ProduceResponse = c.send(api, v, &req);
                let p = &r.responses[0].partition_responses[0];
                assert_eq!(p.error_code, ResponseError::UnknownTopicId.code(), "{at}");
            }
        }
        ApiKey::Fetch => {
            let mut req = Client::fetch_request("t", 0, 0, 0, 0);
            if v >= 13 {
                // KIP-516: the topic by id only
                req.topics[0].topic_id = topic_id(c, "t");
                req.topics[0].topic = Default::default();
            }
            let r: FetchResponse = c.send(api, v, &req);
            let p = &r.responses[0].partitions[0];
            assert_eq!((r.error_code, p.error_code), (0, 0), "{at}");
            let recs = common::records(p.records.clone().expect("records are never null"));
            assert_eq!(recs.first().map(|r| r.1.as_str()), Some("x"), "{at}");
            if v >= 13 {
                assert_eq!(r.responses[0].topic_id, topic_id(c, "t"), "{at}");
                req.topics[0].topic_id = uuid::Uuid::from_u128(7);
                let r: FetchResponse = c.send(api, v, &req);
                let p = &r.responses[0].partitions[0];
                assert_eq!(p.error_code, ResponseError::UnknownTopicId.code(), "{at}");
            }
        }
        ApiKey::ListOffsets => {
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1)])]);
            let r: ListOffsetsResponse = c.send(api, v, &req);
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "{at}");
            assert!(p.offset >= 1, "{at}");
        }
        ApiKey::Metadata => {
            let req = MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name("t"))),
            ]));
            let r: MetadataResponse = c.send(api, v, &req);
            assert_eq!(r.brokers.len(), 1, "{at}");
            assert_eq!(r.topics[0].error_code, 0, "{at}");
            assert_eq!(r.topics[0].partitions.len(), 2, "{at}");
        }
        ApiKey::ApiVersions => {
            let r: ApiVersionsResponse = c.send(api, v, &ApiVersionsRequest::default());
            assert_eq!(r.error_code, 0, "{at}");
            assert!(!r.api_keys.is_empty(), "{at}");
        }
        ApiKey::CreateTopics => {
            let req = CreateTopicsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(name(&format!("created-v{v}")))
                    .with_num_partitions(1)
                    .with_replication_factor(1)]);
            let r: CreateTopicsResponse = c.send(api, v, &req);
            assert_eq!(r.topics[0].error_code, 0, "{at}");
        }
        ApiKey::DeleteTopics => {
            let topic = format!("doomed-v{v}");
            assert_eq!(c.create_topic(&topic, 1, &[]), 0, "{at}");
            let req = if v >= 6 {
                DeleteTopicsRequest::default().with_topics(vec![
                    DeleteTopicState::default().with_name(Some(name(&topic)))
                ])
            } else {
                DeleteTopicsRequest::default().with_topic_names(vec![name(&topic)])
            };
            let r: DeleteTopicsResponse = c.send(api, v, &req.with_timeout_ms(5000));
            assert_eq!(r.responses[0].error_code, 0, "{at}");
        }
        ApiKey::DeleteRecords => {
            let req = DeleteRecordsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![DeleteRecordsTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![DeleteRecordsPartition::default()
                        .with_partition_index(1)
                        .with_offset(0)])]);
            let r: DeleteRecordsResponse = c.send(api, v, &req);
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "{at}");
        }
        ApiKey::InitProducerId => {
            let req = InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000);
            let r: InitProducerIdResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, 0, "{at}");
            assert!(r.producer_id.0 >= 0, "{at}");
        }
        ApiKey::OffsetForLeaderEpoch => {
            let req = OffsetForLeaderEpochRequest::default().with_topics(vec![
                OffsetForLeaderTopic::default()
                    .with_topic(name("t"))
                    .with_partitions(vec![OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(-1)
                        .with_leader_epoch(0)]),
            ]);
            let r: OffsetForLeaderEpochResponse = c.send(api, v, &req);
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "{at}");
            assert!(p.end_offset >= 1, "{at}");
        }
        ApiKey::DescribeConfigs => {
            let req = DescribeConfigsRequest::default()
                .with_include_synonyms(v >= 1)
                .with_resources(vec![DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))]);
            let r: DescribeConfigsResponse = c.send(api, v, &req);
            assert_eq!(r.results[0].error_code, 0, "{at}");
            assert!(
                r.results[0]
                    .configs
                    .iter()
                    .any(|c| c.name.as_str() == "retention.ms"),
                "{at}"
            );
        }
        ApiKey::AlterConfigs => {
            let req = AlterConfigsRequest::default().with_resources(vec![
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))
                    .with_configs(vec![alter_configs_request::AlterableConfig::default()
                        .with_name(s("retention.bytes"))
                        .with_value(Some(s("1073741824")))]),
            ]);
            let r: AlterConfigsResponse = c.send(api, v, &req);
            assert_eq!(r.responses[0].error_code, 0, "{at}");
        }
        ApiKey::IncrementalAlterConfigs => {
            let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
                incremental_alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))
                    .with_configs(vec![
                        incremental_alter_configs_request::AlterableConfig::default()
                            .with_name(s("retention.ms"))
                            .with_config_operation(0)
                            .with_value(Some(s("86400000"))),
                    ]),
            ]);
            let r: IncrementalAlterConfigsResponse = c.send(api, v, &req);
            assert_eq!(r.responses[0].error_code, 0, "{at}");
        }
        ApiKey::DescribeLogDirs => {
            let req = DescribeLogDirsRequest::default().with_topics(None);
            let r: DescribeLogDirsResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, 0, "{at}");
            let dir = &r.results[0];
            assert_eq!(dir.error_code, 0, "{at}");
            assert!(dir.topics.iter().any(|t| t.name.as_str() == "t"), "{at}");
            if v >= 4 {
                assert!(dir.total_bytes > 0, "{at}: total bytes of the file system");
                assert!(
                    (0..=dir.total_bytes).contains(&dir.usable_bytes),
                    "{at}: usable bytes"
                );
            }
        }
        ApiKey::CreatePartitions => {
            let topic = format!("grown-v{v}");
            assert_eq!(c.create_topic(&topic, 1, &[]), 0, "{at}");
            let req = CreatePartitionsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![CreatePartitionsTopic::default()
                    .with_name(name(&topic))
                    .with_count(3)]);
            let r: CreatePartitionsResponse = c.send(api, v, &req);
            assert_eq!(r.results[0].error_code, 0, "{at}");
        }
        ApiKey::DescribeCluster => {
            let r: DescribeClusterResponse = c.send(api, v, &DescribeClusterRequest::default());
            assert_eq!(r.error_code, 0, "{at}");
            assert_eq!(r.brokers.len(), 1, "{at}");
        }
        ApiKey::UpdateFeatures => {
            // The level a new cluster already has: a no-op upgrade, answered as done.
            let u = update_features_request::FeatureUpdateKey::default()
                .with_feature(s("transaction.version"))
                .with_max_version_level(2);
            let u = match v {
                0 => u,
                _ => u.with_upgrade_type(1),
            };
            let r: UpdateFeaturesResponse = c.send(
                api,
                v,
                &UpdateFeaturesRequest::default()
                    .with_timeout_ms(30_000)
                    .with_feature_updates(vec![u]),
            );
            assert_eq!(r.error_code, 0, "{at}: {:?}", r.error_message);
            let results: Vec<_> = r
                .results
                .iter()
                .map(|x| (x.feature.to_string(), x.error_code))
                .collect();
            match v {
                0 | 1 => assert_eq!(results, [("transaction.version".to_string(), 0)], "{at}"),
                _ => assert!(results.is_empty(), "{at}"),
            }
        }
        ApiKey::DescribeTopicPartitions => {
            let req = DescribeTopicPartitionsRequest::default()
                .with_response_partition_limit(100)
                .with_topics(vec![
                    describe_topic_partitions_request::TopicRequest::default().with_name(name("t")),
                ]);
            let r: DescribeTopicPartitionsResponse = c.send(api, v, &req);
            assert_eq!(r.topics[0].error_code, 0, "{at}");
            assert_eq!(r.topics[0].partitions.len(), 2, "{at}");
        }
        ApiKey::ElectLeaders => {
            let req = ElectLeadersRequest::default()
                .with_election_type(0)
                .with_timeout_ms(5000)
                .with_topic_partitions(Some(vec![
                    elect_leaders_request::TopicPartitions::default()
                        .with_topic(name("t"))
                        .with_partitions(vec![0, 9]),
                ]));
            let r: ElectLeadersResponse = c.send(api, v, &req);
            let codes: Vec<i16> = r.replica_election_results[0]
                .partition_result
                .iter()
                .map(|p| p.error_code)
                .collect();
            // One node: its only replica already leads; partition 9 does not exist.
            assert_eq!(
                codes,
                vec![
                    ResponseError::ElectionNotNeeded.code(),
                    ResponseError::UnknownTopicOrPartition.code()
                ],
                "{at}"
            );
        }
        ApiKey::AlterPartitionReassignments => {
            use kafka_protocol::messages::alter_partition_reassignments_request::*;
            let req = AlterPartitionReassignmentsRequest::default().with_topics(vec![
                ReassignableTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![ReassignablePartition::default()
                        .with_partition_index(0)
                        .with_replicas(Some(vec![BrokerId(1)]))]),
            ]);
            let r: AlterPartitionReassignmentsResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, 0, "{at}");
            assert_eq!(r.responses[0].partitions[0].error_code, 0, "{at}");
        }
        ApiKey::ListPartitionReassignments => {
            let r: ListPartitionReassignmentsResponse =
                c.send(api, v, &ListPartitionReassignmentsRequest::default());
            assert_eq!(r.error_code, 0, "{at}");
            assert!(r.topics.is_empty(), "{at}");
        }
        ApiKey::DescribeQuorum => {
            use kafka_protocol::messages::describe_quorum_request::*;
            let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
                .with_topic_name(name("__cluster_metadata"))
                .with_partitions(vec![PartitionData::default()])]);
            let r: DescribeQuorumResponse = c.send(api, v, &req);
            // One node is a quorum of one voter, which leads.
            assert_eq!(r.error_code, 0, "{at}");
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "{at}");
            assert_eq!(p.leader_id.0, 1, "{at}");
            let voters: Vec<i32> = p.current_voters.iter().map(|v| v.replica_id.0).collect();
            assert_eq!(voters, vec![1], "{at}");
        }
        ApiKey::ListConfigResources => {
            let req = ListConfigResourcesRequest::default();
            let r: ListConfigResourcesResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, 0, "{at}");
        }
        ApiKey::FindCoordinator => {
            let req = if v >= 4 {
                FindCoordinatorRequest::default().with_coordinator_keys(vec![s("g")])
            } else {
                FindCoordinatorRequest::default().with_key(s("g"))
            };
            let r: FindCoordinatorResponse = c.send(api, v, &req);
            if v >= 4 {
                assert_eq!(r.coordinators[0].error_code, 0, "{at}");
                assert_eq!(r.coordinators[0].node_id.0, 1, "{at}");
            } else {
                assert_eq!((r.error_code, r.node_id.0), (0, 1), "{at}");
            }
        }
        ApiKey::JoinGroup => {
            let group = format!("join-v{v}");
            let mut r: JoinGroupResponse = c.send(api, v, &join_request(v, &group, ""));
            if v >= 4 {
                assert_eq!(r.error_code, ResponseError::MemberIdRequired.code(), "{at}");
                r = c.send(api, v, &join_request(v, &group, &r.member_id));
            }
            assert_eq!((r.error_code, r.generation_id), (0, 1), "{at}");
            assert_eq!(r.leader, r.member_id, "{at}");
            assert_eq!(r.members.len(), 1, "{at}");
        }
        ApiKey::SyncGroup => {
            let group = format!("sync-v{v}");
            let (member, generation) = join(c, &group);
            let req = SyncGroupRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_member_id(s(&member))
                .with_generation_id(generation)
                .with_assignments(vec![SyncGroupRequestAssignment::default()
                    .with_member_id(s(&member))
                    .with_assignment(bytes::Bytes::from_static(b"mine"))]);
            let r: SyncGroupResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, 0, "{at}");
            assert_eq!(&r.assignment[..], b"mine", "{at}");
        }
        ApiKey::Heartbeat => {
            let group = format!("hb-v{v}");
            let (member, generation) = join_and_sync(c, &group);
            let req = HeartbeatRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_member_id(s(&member))
                .with_generation_id(generation);
            let r: HeartbeatResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, 0, "{at}");
        }
        ApiKey::LeaveGroup => {
            let group = format!("leave-v{v}");
            let (member, _) = join_and_sync(c, &group);
            let req = if v >= 3 {
                LeaveGroupRequest::default().with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(s(&member)),
                ])
            } else {
                LeaveGroupRequest::default().with_member_id(s(&member))
            };
            let r: LeaveGroupResponse = c.send(api, v, &req.with_group_id(GroupId(s(&group))));
            assert_eq!(r.error_code, 0, "{at}");
            if v >= 3 {
                assert_eq!(r.members[0].error_code, 0, "{at}");
            }
        }
        ApiKey::DescribeGroups => {
            let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s("stable"))]);
            let r: DescribeGroupsResponse = c.send(api, v, &req);
            let g = &r.groups[0];
            assert_eq!(g.error_code, 0, "{at}");
            assert_eq!(g.group_state.as_str(), "Stable", "{at}");
            assert_eq!(g.protocol_data.as_str(), "range", "{at}");
            assert_eq!(g.members.len(), 1, "{at}");
        }
        ApiKey::ListGroups => {
            let r: ListGroupsResponse = c.send(api, v, &ListGroupsRequest::default());
            assert_eq!(r.error_code, 0, "{at}");
            assert!(
                r.groups.iter().any(|g| g.group_id.as_str() == "stable"),
                "{at}"
            );
        }
        ApiKey::DeleteGroups => {
            let group = format!("deleted-v{v}");
            commit(c, &group, 3);
            let req = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(&group))]);
            let r: DeleteGroupsResponse = c.send(api, v, &req);
            assert_eq!(r.results[0].error_code, 0, "{at}");
        }
        ApiKey::OffsetCommit => {
            let req = commit_request(&format!("commit-v{v}"), 5);
            let r: OffsetCommitResponse = c.send(api, v, &req);
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "{at}");
        }
        ApiKey::OffsetFetch => {
            let group = format!("fetch-v{v}");
            commit(c, &group, 9);
            let r: OffsetFetchResponse = if v >= 8 {
                let req = OffsetFetchRequest::default().with_groups(vec![
                    offset_fetch_request::OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(s(&group)))
                        .with_topics(None),
                ]);
                c.send(api, v, &req)
            } else {
                let req = OffsetFetchRequest::default()
                    .with_group_id(GroupId(s(&group)))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopic::default()
                            .with_name(name("t"))
                            .with_partition_indexes(vec![0]),
                    ]));
                c.send(api, v, &req)
            };
            let offset = if v >= 8 {
                assert_eq!(r.groups[0].error_code, 0, "{at}");
                r.groups[0].topics[0].partitions[0].committed_offset
            } else {
                r.topics[0].partitions[0].committed_offset
            };
            assert_eq!(offset, 9, "{at}");
        }
        ApiKey::OffsetDelete => {
            commit(c, "offsets-deleted", 2);
            let req = OffsetDeleteRequest::default()
                .with_group_id(GroupId(s("offsets-deleted")))
                .with_topics(vec![
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![
                            offset_delete_request::OffsetDeleteRequestPartition::default()
                                .with_partition_index(0),
                        ]),
                ]);
            let r: OffsetDeleteResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, 0, "{at}");
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "{at}");
        }
        ApiKey::ConsumerGroupHeartbeat => {
            let group = format!("kip848-v{v}");
            let member = if v >= 1 {
                format!("member-{v}")
            } else {
                String::new()
            };
            let r: ConsumerGroupHeartbeatResponse = c.send(api, v, &cg_join(&group, &member));
            assert_eq!(r.error_code, 0, "{at}: {:?}", r.error_message);
            assert!(r.member_epoch > 0, "{at}");
            let a = r
                .assignment
                .expect("the first answer carries the assignment");
            assert_eq!(a.topic_partitions[0].partitions, vec![0, 1], "{at}");
            let leave = ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_member_id(r.member_id.unwrap())
                .with_member_epoch(-1);
            let r: ConsumerGroupHeartbeatResponse = c.send(api, v, &leave);
            assert_eq!((r.error_code, r.member_epoch), (0, -1), "{at}");
        }
        ApiKey::ConsumerGroupDescribe => {
            let req = ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(s("kip848")), GroupId(s("stable"))]);
            let r: ConsumerGroupDescribeResponse = c.send(api, v, &req);
            let g = &r.groups[0];
            assert_eq!(g.error_code, 0, "{at}");
            assert_eq!(g.group_state.as_str(), "Stable", "{at}");
            assert_eq!(g.members.len(), 1, "{at}");
            let assigned = &g.members[0].assignment.topic_partitions[0];
            assert_eq!(assigned.topic_name.as_str(), "t", "{at}");
            assert_eq!(
                r.groups[1].error_code,
                ResponseError::GroupIdNotFound.code(),
                "{at}: a classic group is not a consumer group"
            );
        }
        ApiKey::AddPartitionsToTxn => {
            let id = format!("apt-v{v}");
            let (pid, epoch) = txn_init(c, &id);
            let topics = vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![0]),
            ];
            let codes = |r: &AddPartitionsToTxnResponse| -> Vec<i16> {
                r.results_by_topic_v3_and_below
                    .iter()
                    .chain(
                        r.results_by_transaction
                            .iter()
                            .flat_map(|t| &t.topic_results),
                    )
                    .flat_map(|t| &t.results_by_partition)
                    .map(|p| p.partition_error_code)
                    .collect()
            };
            if v <= 3 {
                let req = AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(tid(&id))
                    .with_v3_and_below_producer_id(pid.into())
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(topics);
                let r: AddPartitionsToTxnResponse = c.send(api, v, &req);
                assert_eq!(codes(&r), vec![0], "{at}");
            } else {
                // The brokers' form: add, then verify (KIP-890).
                txn_add(c, &id, pid, epoch);
                let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(tid(&id))
                        .with_producer_id(pid.into())
                        .with_producer_epoch(epoch)
                        .with_verify_only(true)
                        .with_topics(topics),
                ]);
                let r: AddPartitionsToTxnResponse = c.send(api, v, &req);
                assert_eq!((r.error_code, codes(&r)), (0, vec![0]), "{at}");
            }
        }
        ApiKey::AddOffsetsToTxn => {
            let id = format!("aot-v{v}");
            let (pid, epoch) = txn_init(c, &id);
            let r: AddOffsetsToTxnResponse = c.send(
                api,
                v,
                &AddOffsetsToTxnRequest::default()
                    .with_transactional_id(tid(&id))
                    .with_producer_id(pid.into())
                    .with_producer_epoch(epoch)
                    .with_group_id(GroupId(s("g"))),
            );
            assert_eq!(r.error_code, 0, "{at}");
        }
        ApiKey::EndTxn => {
            let id = format!("end-v{v}");
            let (pid, epoch) = txn_init(c, &id);
            txn_add(c, &id, pid, epoch);
            let r: EndTxnResponse = c.send(
                api,
                v,
                &EndTxnRequest::default()
                    .with_transactional_id(tid(&id))
                    .with_producer_id(pid.into())
                    .with_producer_epoch(epoch)
                    .with_committed(true),
            );
            assert_eq!(r.error_code, 0, "{at}");
            if v >= 5 {
                // Transaction version 2: the epoch is bumped at every end.
                assert_eq!(
                    (r.producer_id.0, r.producer_epoch),
                    (pid, epoch + 1),
                    "{at}"
                );
            }
        }
        ApiKey::WriteTxnMarkers => {
            // A marker for a producer with nothing open is still written, as Kafka does.
            let r: WriteTxnMarkersResponse = c.send(
                api,
                v,
                &WriteTxnMarkersRequest::default().with_markers(vec![
                    write_txn_markers_request::WritableTxnMarker::default()
                        .with_producer_id(123_456.into())
                        .with_producer_epoch(0)
                        .with_transaction_result(false)
                        .with_coordinator_epoch(0)
                        .with_topics(vec![
                            write_txn_markers_request::WritableTxnMarkerTopic::default()
                                .with_name(name("t"))
                                .with_partition_indexes(vec![0]),
                        ]),
                ]),
            );
            assert_eq!(r.markers[0].topics[0].partitions[0].error_code, 0, "{at}");
        }
        ApiKey::TxnOffsetCommit => {
            let id = format!("toc-v{v}");
            let (pid, epoch) = txn_init(c, &id);
            if v < 5 {
                // Before transaction version 2 the client adds the group's partition itself
                // (the coordinator verifies it is there); v5 has it added implicitly.
                let r: AddOffsetsToTxnResponse = c.send(
                    ApiKey::AddOffsetsToTxn,
                    3,
                    &AddOffsetsToTxnRequest::default()
                        .with_transactional_id(tid(&id))
                        .with_producer_id(pid.into())
                        .with_producer_epoch(epoch)
                        .with_group_id(GroupId(s("g"))),
                );
                assert_eq!(r.error_code, 0, "{at}");
            }
            let r: TxnOffsetCommitResponse = c.send(
                api,
                v,
                &TxnOffsetCommitRequest::default()
                    .with_transactional_id(tid(&id))
                    .with_group_id(GroupId(s("g")))
                    .with_producer_id(pid.into())
                    .with_producer_epoch(epoch)
                    .with_generation_id(-1)
                    .with_topics(vec![
                        txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                            .with_name(name("t"))
                            .with_partitions(vec![
                                txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                                    .with_partition_index(0)
                                    .with_committed_offset(1),
                            ]),
                    ]),
            );
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "{at}");
        }
        ApiKey::DescribeProducers => {
            let r: DescribeProducersResponse = c.send(
                api,
                v,
                &DescribeProducersRequest::default().with_topics(vec![
                    describe_producers_request::TopicRequest::default()
                        .with_name(name("t"))
                        .with_partition_indexes(vec![0]),
                ]),
            );
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "{at}");
        }
        ApiKey::DescribeTransactions => {
            txn_init(c, "described");
            let r: DescribeTransactionsResponse = c.send(
                api,
                v,
                &DescribeTransactionsRequest::default()
                    .with_transactional_ids(vec![tid("described")]),
            );
            let st = &r.transaction_states[0];
            assert_eq!(
                (st.error_code, st.transaction_state.as_str()),
                (0, "Empty"),
                "{at}"
            );
        }
        ApiKey::ListTransactions => {
            txn_init(c, "listed");
            let r: ListTransactionsResponse = c.send(
                api,
                v,
                &ListTransactionsRequest::default().with_duration_filter(-1),
            );
            assert_eq!(r.error_code, 0, "{at}");
            assert!(
                r.transaction_states
                    .iter()
                    .any(|t| t.transactional_id.as_str() == "listed"),
                "{at}"
            );
            if v >= 2 {
                // The pattern must match the whole id; a broken one is refused.
                let with = |c: &mut Client, p: &str| {
                    let req = ListTransactionsRequest::default()
                        .with_duration_filter(-1)
                        .with_transactional_id_pattern(Some(s(p)));
                    let r: ListTransactionsResponse = c.send(api, v, &req);
                    let ids: Vec<String> = r
                        .transaction_states
                        .iter()
                        .map(|t| t.transactional_id.to_string())
                        .collect();
                    (r.error_code, ids)
                };
                assert_eq!(with(c, "list.d"), (0, vec!["listed".to_string()]), "{at}");
                assert_eq!(with(c, "list"), (0, vec![]), "{at}");
                assert_eq!(
                    with(c, "(unclosed").0,
                    ResponseError::InvalidRegularExpression.code(),
                    "{at}"
                );
            }
        }
        ApiKey::ShareGroupHeartbeat => {
            let req = ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s("share-v")))
                .with_member_id(s("sm-1"))
                .with_member_epoch(0)
                .with_subscribed_topic_names(Some(vec![name("t")]));
            let r: ShareGroupHeartbeatResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, 0, "{at}: {:?}", r.error_message);
            assert_eq!(r.member_epoch, 1, "{at}");
            let a = r.assignment.expect("assigned on joining");
            assert_eq!(a.topic_partitions[0].partitions, [0, 1], "{at}");
        }
        ApiKey::ShareGroupDescribe => {
            let req = ShareGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(s("share-v")), GroupId(s("stable"))]);
            let r: ShareGroupDescribeResponse = c.send(api, v, &req);
            let g = &r.groups[0];
            assert_eq!(
                (g.error_code, g.group_state.as_str()),
                (0, "Stable"),
                "{at}"
            );
            assert_eq!(g.members[0].member_id.as_str(), "sm-1", "{at}");
            // A classic group is not a share group.
            assert_eq!(
                r.groups[1].error_code,
                ResponseError::GroupIdNotFound.code(),
                "{at}"
            );
        }
        ApiKey::ShareFetch => {
            use share_fetch_request::{FetchPartition, FetchTopic};
            let id = topic_id(c, "t");
            let fetch = |c: &mut Client, epoch: i32, wait: i32| -> ShareFetchResponse {
                let req = ShareFetchRequest::default()
                    .with_group_id(Some(GroupId(s("share-v"))))
                    .with_member_id(Some(s("sm-1")))
                    .with_share_session_epoch(epoch)
                    .with_max_wait_ms(wait)
                    .with_min_bytes(1)
                    .with_max_bytes(1 << 20)
                    .with_max_records(100)
                    .with_batch_size(100)
                    .with_topics(vec![FetchTopic::default()
                        .with_topic_id(id)
                        .with_partitions(vec![
                            FetchPartition::default().with_partition_index(0)
                        ])]);
                // v2's new fields at their defaults (wire::newer writes v2).
                let req = cairn::wire::newer::ShareFetch {
                    request: req,
                    ..Default::default()
                };
                let r: cairn::wire::newer::ShareFetchReply = c.send(ApiKey::ShareFetch, v, &req);
                r.0
            };
            let r = fetch(c, 0, 0);
            assert_eq!(r.error_code, 0, "{at}: {:?}", r.error_message);
            // The group started at the end of the log: only what comes now is acquired.
            assert_eq!(c.produce("t", 0, batch(&["queued"]), -1).0, 0);
            let r = fetch(c, 1, 5000);
            let p = &r.responses[0].partitions[0];
            assert_eq!((r.error_code, p.error_code), (0, 0), "{at}");
            let (_, end, _) = c.list_offset("t", 0, -1);
            let got: Vec<(i64, i64, i16)> = p
                .acquired_records
                .iter()
                .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
                .collect();
            assert_eq!(got, [(end - 1, end - 1, 1)], "{at}");
            // Accepted, so every record is finished with when the next version runs.
            let r =
                common::share::share_ack(c, "share-v", "sm-1", 2, id, &[(end - 1, end - 1, &[1])]);
            assert_eq!(r.responses[0].partitions[0].error_code, 0, "{at}");
        }
        ApiKey::ShareAcknowledge => {
            use share_acknowledge_request::{
                AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch,
            };
            let id = topic_id(c, "t");
            // A fresh session (its epoch back to 0) with a new record acquired, for this
            // version to acknowledge.
            let r = common::share::share_fetch(c, "share-v", "sm-1", 0, id, &[], 0);
            assert_eq!(r.error_code, 0, "{at}: {:?}", r.error_message);
            assert_eq!(c.produce("t", 0, batch(&["to-ack"]), -1).0, 0);
            let r = common::share::share_fetch(c, "share-v", "sm-1", 1, id, &[], 5000);
            assert_eq!(common::share::acquired(&r).len(), 1, "{at}");
            let (_, end, _) = c.list_offset("t", 0, -1);
            let ack = |c: &mut Client, epoch: i32| -> ShareAcknowledgeResponse {
                let req = ShareAcknowledgeRequest::default()
                    .with_group_id(Some(GroupId(s("share-v"))))
                    .with_member_id(Some(s("sm-1")))
                    .with_share_session_epoch(epoch)
                    .with_topics(vec![AcknowledgeTopic::default()
                        .with_topic_id(id)
                        .with_partitions(vec![AcknowledgePartition::default()
                            .with_partition_index(0)
                            .with_acknowledgement_batches(vec![
                                AcknowledgementBatch::default()
                                    .with_first_offset(end - 1)
                                    .with_last_offset(end - 1)
                                    .with_acknowledge_types(vec![1]),
                            ])])]);
                let req = cairn::wire::newer::ShareAcknowledge {
                    request: req,
                    renew_ack: false,
                };
                let r: cairn::wire::newer::ShareAcknowledgeReply =
                    c.send(ApiKey::ShareAcknowledge, v, &req);
                // v2 answers the group's lock duration.
                assert_eq!(
                    r.acquisition_lock_timeout_ms > 0,
                    v >= 2 && r.response.error_code == 0
                );
                r.response
            };
            // ShareFetch's session is at epoch 2: the record it acquired is accepted once.
            let r = ack(c, 2);
            assert_eq!(r.error_code, 0, "{at}: {:?}", r.error_message);
            assert_eq!(r.responses[0].partitions[0].error_code, 0, "{at}");
            let r = ack(c, 3);
            assert_eq!(
                r.responses[0].partitions[0].error_code,
                ResponseError::InvalidRecordState.code(),
                "{at}"
            );
            let r = ack(c, 9);
            assert_eq!(
                r.error_code,
                ResponseError::InvalidShareSessionEpoch.code(),
                "{at}"
            );
        }
        ApiKey::InitializeShareGroupState => {
            use initialize_share_group_state_request::{InitializeStateData, PartitionData};
            let req = InitializeShareGroupStateRequest::default()
                .with_group_id(s("state-v"))
                .with_topics(vec![InitializeStateData::default()
                    .with_topic_id(topic_id(c, "t"))
                    .with_partitions(vec![PartitionData::default()
                        .with_partition(0)
                        .with_state_epoch(1)
                        .with_start_offset(5)])]);
            let code = share_state_call(c, |c| {
                let r: InitializeShareGroupStateResponse = c.send(api, v, &req);
                r.results[0].partitions[0].error_code
            });
            assert_eq!(code, 0, "{at}");
        }
        ApiKey::ReadShareGroupState => {
            use read_share_group_state_request::{PartitionData, ReadStateData};
            let req = ReadShareGroupStateRequest::default()
                .with_group_id(s("state-v"))
                .with_topics(vec![ReadStateData::default()
                    .with_topic_id(topic_id(c, "t"))
                    .with_partitions(vec![PartitionData::default()
                        .with_partition(0)
                        .with_leader_epoch(0)])]);
            let mut got = (0, 0, 0);
            let code = share_state_call(c, |c| {
                let r: ReadShareGroupStateResponse = c.send(api, v, &req);
                let p = &r.results[0].partitions[0];
                got = (p.state_epoch, p.start_offset, p.state_batches.len());
                p.error_code
            });
            assert_eq!((code, got), (0, (1, 5, 0)), "{at}");
        }
        ApiKey::WriteShareGroupState => {
            use write_share_group_state_request::{PartitionData, StateBatch, WriteStateData};
            let req = WriteShareGroupStateRequest::default()
                .with_group_id(s("state-v"))
                .with_topics(vec![WriteStateData::default()
                    .with_topic_id(topic_id(c, "t"))
                    .with_partitions(vec![PartitionData::default()
                        .with_partition(0)
                        .with_state_epoch(1)
                        .with_leader_epoch(0)
                        .with_start_offset(6)
                        .with_state_batches(vec![StateBatch::default()
                            .with_first_offset(7)
                            .with_last_offset(7)
                            .with_delivery_state(2)
                            .with_delivery_count(1)])])]);
            let code = share_state_call(c, |c| {
                let r: WriteShareGroupStateResponse = c.send(api, v, &req);
                r.results[0].partitions[0].error_code
            });
            assert_eq!(code, 0, "{at}");
        }
        ApiKey::DeleteShareGroupState => {
            use delete_share_group_state_request::{DeleteStateData, PartitionData};
            // Partition 1 has no state: deleting it is a no-op; partition 0 keeps its own.
            let req = DeleteShareGroupStateRequest::default()
                .with_group_id(s("state-v"))
                .with_topics(vec![DeleteStateData::default()
                    .with_topic_id(topic_id(c, "t"))
                    .with_partitions(vec![PartitionData::default().with_partition(1)])]);
            let code = share_state_call(c, |c| {
                let r: DeleteShareGroupStateResponse = c.send(api, v, &req);
                r.results[0].partitions[0].error_code
            });
            assert_eq!(code, 0, "{at}");
        }
        ApiKey::ReadShareGroupStateSummary => {
            use read_share_group_state_summary_request::{PartitionData, ReadStateSummaryData};
            let req = ReadShareGroupStateSummaryRequest::default()
                .with_group_id(s("state-v"))
                .with_topics(vec![ReadStateSummaryData::default()
                    .with_topic_id(topic_id(c, "t"))
                    .with_partitions(vec![PartitionData::default().with_partition(0)])]);
            let mut got = (0, 0, None);
            let code = share_state_call(c, |c| {
                let req = cairn::wire::newer::LaidOutAs::<_, 0>(req.clone());
                let r: cairn::wire::newer::ShareStateSummaryReply = c.send(api, v, &req);
                let p = &r.response.results[0].partitions[0];
                let done = r
                    .delivery_complete
                    .get(&(req.0.topics[0].topic_id, 0))
                    .copied();
                got = (p.state_epoch, p.start_offset, done);
                p.error_code
            });
            // v1 (KIP-1226) counts the records past the start whose delivery is complete:
            // offset 7, acknowledged as WriteShareGroupState wrote it above.
            let done = (v >= 1).then_some(1);
            assert_eq!((code, got), (0, (1, 6, done)), "{at}");
        }
        ApiKey::DescribeShareGroupOffsets => {
            use describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
            let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                DescribeShareGroupOffsetsRequestGroup::default()
                    .with_group_id(GroupId(s("share-v")))
                    .with_topics(None),
            ]);
            let req = cairn::wire::newer::LaidOutAs::<_, 0>(req);
            let r: cairn::wire::newer::ShareGroupOffsetsReply = c.send(api, v, &req);
            let g = &r.response.groups[0];
            assert_eq!(g.error_code, 0, "{at}: {:?}", g.error_message);
            let (_, end, _) = c.list_offset("t", 0, -1);
            let t = &g.topics[0];
            let p0 = t.partitions.iter().find(|p| p.partition_index == 0);
            // Everything up to the end was accepted: the share partition starts there, and
            // v1 (KIP-1226) shows no lag.
            assert_eq!(p0.map(|p| p.start_offset), Some(end), "{at}");
            let lag = r.lags.get(&("share-v".to_string(), t.topic_id, 0)).copied();
            assert_eq!(lag, (v >= 1).then_some(0), "{at}");
        }
        ApiKey::AlterShareGroupOffsets => {
            use alter_share_group_offsets_request::*;
            let alter = |c: &mut Client, group: &str| -> AlterShareGroupOffsetsResponse {
                let req = AlterShareGroupOffsetsRequest::default()
                    .with_group_id(GroupId(s(group)))
                    .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(name("t"))
                        .with_partitions(vec![
                            AlterShareGroupOffsetsRequestPartition::default()
                                .with_partition_index(0)
                                .with_start_offset(0),
                        ])]);
                c.send(ApiKey::AlterShareGroupOffsets, v, &req)
            };
            // share-v has a member; share-alter does not exist yet.
            assert_eq!(
                alter(c, "share-v").error_code,
                ResponseError::NonEmptyGroup.code(),
                "{at}"
            );
            let r = alter(c, "share-alter");
            assert_eq!(r.error_code, 0, "{at}: {:?}", r.error_message);
            assert_eq!(r.responses[0].partitions[0].error_code, 0, "{at}");
        }
        ApiKey::DeleteShareGroupOffsets => {
            use delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic as Topic;
            let req = DeleteShareGroupOffsetsRequest::default()
                .with_group_id(GroupId(s("share-alter")))
                .with_topics(vec![
                    Topic::default().with_topic_name(name("t")),
                    Topic::default().with_topic_name(name("missing")),
                ]);
            let r: DeleteShareGroupOffsetsResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, 0, "{at}: {:?}", r.error_message);
            let codes: Vec<i16> = r.responses.iter().map(|t| t.error_code).collect();
            assert_eq!(
                codes,
                [0, ResponseError::UnknownTopicOrPartition.code()],
                "{at}"
            );
        }
        // A PLAINTEXT listener has no SASL: ILLEGAL_SASL_STATE, as Kafka answers
        // (tests/sasl.rs drives a SASL listener).
        ApiKey::SaslHandshake => {
            let req = SaslHandshakeRequest::default().with_mechanism(s("PLAIN"));
            let r: SaslHandshakeResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, ResponseError::IllegalSaslState.code(), "{at}");
        }
        ApiKey::SaslAuthenticate => {
            let req = SaslAuthenticateRequest::default()
                .with_auth_bytes(bytes::Bytes::from_static(b"\0a\0b"));
            let r: SaslAuthenticateResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, ResponseError::IllegalSaslState.code(), "{at}");
        }
        // With no authorizer, as here, Kafka answers the ACL APIs SECURITY_DISABLED
        // (tests/acls.rs runs them with one).
        ApiKey::CreateAcls => {
            let creation = create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(s("t"))
                .with_resource_pattern_type(3)
                .with_principal(s("User:alice"))
                .with_host(s("*"))
                .with_operation(3)
                .with_permission_type(3);
            let r: CreateAclsResponse = c.send(
                api,
                v,
                &CreateAclsRequest::default().with_creations(vec![creation]),
            );
            assert_eq!(r.results.len(), 1, "{at}");
            assert_eq!(
                r.results[0].error_code,
                ResponseError::SecurityDisabled.code(),
                "{at}"
            );
        }
        ApiKey::DescribeAcls => {
            let req = DescribeAclsRequest::default()
                .with_resource_type_filter(1)
                .with_pattern_type_filter(1)
                .with_operation(1)
                .with_permission_type(1);
            let r: DescribeAclsResponse = c.send(api, v, &req);
            assert_eq!(r.error_code, ResponseError::SecurityDisabled.code(), "{at}");
        }
        ApiKey::DeleteAcls => {
            let filter = delete_acls_request::DeleteAclsFilter::default()
                .with_resource_type_filter(1)
                .with_pattern_type_filter(1)
                .with_operation(1)
                .with_permission_type(1);
            let r: DeleteAclsResponse = c.send(
                api,
                v,
                &DeleteAclsRequest::default().with_filters(vec![filter]),
            );
            assert_eq!(r.filter_results.len(), 1, "{at}");
            assert_eq!(
                r.filter_results[0].error_code,
                ResponseError::SecurityDisabled.code(),
                "{at}"
            );
        }
        ApiKey::DescribeClientQuotas => {
            let r: DescribeClientQuotasResponse =
                c.send(api, v, &DescribeClientQuotasRequest::default());
            assert_eq!(r.error_code, 0, "{at}");
            assert_eq!(r.entries, Some(Vec::new()), "{at}");
        }
        ApiKey::AlterClientQuotas => {
            use alter_client_quotas_request::{EntityData, EntryData, OpData};
            let entry = EntryData::default()
                .with_entity(vec![EntityData::default()
                    .with_entity_type(s("client-id"))
                    .with_entity_name(Some(s(&format!("quota-v{v}"))))])
                .with_ops(vec![OpData::default()
                    .with_key(s("producer_byte_rate"))
                    .with_value(1024.0)]);
            let req = AlterClientQuotasRequest::default().with_entries(vec![entry]);
            let r: AlterClientQuotasResponse = c.send(api, v, &req);
            assert_eq!(r.entries.len(), 1, "{at}");
            assert_eq!(r.entries[0].error_code, 0, "{at}: {:?}", r.entries[0]);
            assert_eq!(
                r.entries[0].entity[0].entity_name.as_deref(),
                Some(&*format!("quota-v{v}")),
                "{at}"
            );
        }
        ApiKey::AlterUserScramCredentials => {
            use alter_user_scram_credentials_request::ScramCredentialUpsertion;
            let upsertion = ScramCredentialUpsertion::default()
                .with_name(s(&format!("user-v{v}")))
                .with_mechanism(1)
                .with_iterations(4096)
                .with_salt(bytes::Bytes::from_static(b"salt"))
                .with_salted_password(bytes::Bytes::from(vec![7u8; 32]));
            let req = AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsertion]);
            let r: AlterUserScramCredentialsResponse = c.send(api, v, &req);
            assert_eq!(
                r.results[0].error_code, 0,
                "{at}: {:?}",
                r.results[0].error_message
            );
        }
        ApiKey::DescribeUserScramCredentials => {
            use describe_user_scram_credentials_request::UserName;
            let req = DescribeUserScramCredentialsRequest::default()
                .with_users(Some(vec![UserName::default().with_name(s("nobody"))]));
            let r: DescribeUserScramCredentialsResponse = c.send(api, v, &req);
            assert_eq!(
                r.results[0].error_code,
                ResponseError::ResourceNotFound.code(),
                "{at}"
            );
        }
        other => {
            panic!("{other:?} is advertised but tests/versions.rs has no request for it: add one")
        }
    }
}

/// Calls the share coordinator until it answers something other than "not ready yet"
/// (its `__share_group_state` partition may still be loading); the error code it gave.
fn share_state_call(c: &mut Client, mut call: impl FnMut(&mut Client) -> i16) -> i16 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let code = call(c);
        let not_ready = [
            ResponseError::CoordinatorNotAvailable.code(),
            ResponseError::CoordinatorLoadInProgress.code(),
            ResponseError::NotCoordinator.code(),
        ];
        if !not_ready.contains(&code) || std::time::Instant::now() > deadline {
            return code;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn tid(v: &str) -> TransactionalId {
    TransactionalId(s(v))
}

/// A transactional producer's InitProducerId for `id`, once the transaction coordinator
/// is up (its first use creates `__transaction_state`): (producer id, epoch).
fn txn_init(c: &mut Client, id: &str) -> (i64, i16) {
    for _ in 0..300 {
        let r: InitProducerIdResponse = c.send(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(tid(id)))
                .with_transaction_timeout_ms(60_000),
        );
        let retriable = [
            ResponseError::CoordinatorLoadInProgress.code(),
            ResponseError::NotCoordinator.code(),
            ResponseError::CoordinatorNotAvailable.code(),
            ResponseError::ConcurrentTransactions.code(),
        ];
        if !retriable.contains(&r.error_code) {
            assert_eq!(r.error_code, 0, "InitProducerId for {id}");
            return (r.producer_id.0, r.producer_epoch);
        }
        // The first FindCoordinator for a transactional id creates the topic.
        let _: FindCoordinatorResponse = c.send(
            ApiKey::FindCoordinator,
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(vec![s(id)]),
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("no transaction coordinator for {id}");
}

/// Adds partition t-0 to `id`'s transaction (AddPartitionsToTxn v3).
fn txn_add(c: &mut Client, id: &str, pid: i64, epoch: i16) {
    let r: AddPartitionsToTxnResponse = c.send(
        ApiKey::AddPartitionsToTxn,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(tid(id))
            .with_v3_and_below_producer_id(pid.into())
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![0]),
            ]),
    );
    let code = r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
    assert_eq!(code, 0, "AddPartitionsToTxn for {id}");
}

/// A KIP-848 join of topic "t".
fn cg_join(group: &str, member: &str) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![name("t")]))
        .with_topic_partitions(Some(vec![]))
}

fn join_request(v: i16, group: &str, member: &str) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_session_timeout_ms(120_000)
        // v0 has no rebalance timeout (the session timeout serves)
        .with_rebalance_timeout_ms(if v >= 1 { 120_000 } else { -1 })
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
        )
        .with_name(s("range"))
        .with_metadata(bytes::Bytes::from_static(b"subscription"))])
}

/// Joins `group` as its only member (JoinGroup v5): (member id, generation).
fn join(c: &mut Client, group: &str) -> (String, i32) {
    let r: JoinGroupResponse = c.send(ApiKey::JoinGroup, 5, &join_request(5, group, ""));
    assert_eq!(r.error_code, ResponseError::MemberIdRequired.code());
    let r: JoinGroupResponse = c.send(ApiKey::JoinGroup, 5, &join_request(5, group, &r.member_id));
    assert_eq!(r.error_code, 0);
    (r.member_id.to_string(), r.generation_id)
}

fn join_and_sync(c: &mut Client, group: &str) -> (String, i32) {
    let (member, generation) = join(c, group);
    let req = SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(&member))
        .with_generation_id(generation);
    let r: SyncGroupResponse = c.send(ApiKey::SyncGroup, 3, &req);
    assert_eq!(r.error_code, 0);
    (member, generation)
}

fn commit_request(group: &str, offset: i64) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(name("t"))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset),
                ]),
        ])
}

fn commit(c: &mut Client, group: &str, offset: i64) {
    let r: OffsetCommitResponse = c.send(ApiKey::OffsetCommit, 8, &commit_request(group, offset));
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
}

#[test]
fn every_advertised_api_answers_at_every_advertised_version() {
    let b = Broker::start_with(&["group.initial.rebalance.delay.ms=0"]);
    let mut c = b.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("t", 2, &[]), 0);
    join_and_sync(&mut c, "stable");
    let r: ConsumerGroupHeartbeatResponse =
        c.send(ApiKey::ConsumerGroupHeartbeat, 1, &cg_join("kip848", "m-1"));
    assert_eq!(r.error_code, 0);
    let (err, _) = c.produce("t", 0, batch(&["x"]), -1);
    assert_eq!(err, 0);

    let mut exercised = 0;
    for a in advertised(&mut c) {
        let api = ApiKey::try_from(a.api_key).expect("advertised key is a known API");
        for v in a.min_version..=a.max_version {
            // Produce v0-2 are advertised for old librdkafka's sake only (see dispatch.rs);
            // tests/bad_input.rs checks that such a request closes just that connection.
            if api == ApiKey::Produce && v < 3 {
                continue;
            }
            exercise(&mut c, api, v);
            exercised += 1;
        }
    }
    // 43 APIs over more than 150 versions today; a shrinking table means a lost API.
    assert!(exercised >= 150, "only {exercised} API versions exercised");
    // The same connection served all of them, in order.
    let r: ApiVersionsResponse = c.send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(r.error_code, 0);
}

/// UpdateFeatures moves `transaction.version` as `kafka-features` asks (what ApiVersions
/// shows follows), refuses what Kafka refuses with INVALID_UPDATE_VERSION and its
/// message, and changes nothing when validating only or when any update is refused.
#[test]
fn update_features_moves_the_transaction_version() {
    let b = Broker::start();
    let mut c = b.client();
    let update = |c: &mut Client, updates: &[(&str, i16, i8)], validate_only: bool| {
        let req = UpdateFeaturesRequest::default()
            .with_timeout_ms(30_000)
            .with_validate_only(validate_only)
            .with_feature_updates(
                updates
                    .iter()
                    .map(|(f, level, kind)| {
                        update_features_request::FeatureUpdateKey::default()
                            .with_feature(s(f))
                            .with_max_version_level(*level)
                            .with_upgrade_type(*kind)
                    })
                    .collect(),
            );
        let r: UpdateFeaturesResponse = c.send(ApiKey::UpdateFeatures, 1, &req);
        (
            r.error_code,
            r.error_message.map(|m| m.to_string()).unwrap_or_default(),
        )
    };
    let level = |c: &mut Client| {
        let r: ApiVersionsResponse = c.send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        let l = r
            .finalized_features
            .iter()
            .find(|f| f.name.as_str() == "transaction.version")
            .map_or(0, |f| f.max_version_level);
        (l, r.finalized_features_epoch)
    };
    let (start, epoch) = level(&mut c);
    assert_eq!(start, 2);
    let invalid = ResponseError::InvalidUpdateVersion.code();

    // A downgrade asked as an upgrade, an upgrade asked as a downgrade, levels and
    // features this release lacks, an unknown upgrade type: refused, nothing changes.
    let (e, m) = update(&mut c, &[("transaction.version", 1, 1)], false);
    assert_eq!(e, invalid);
    assert!(m.contains("without setting the upgrade type"), "{m}");
    let (e, m) = update(&mut c, &[("transaction.version", 3, 1)], false);
    assert_eq!(e, invalid);
    assert!(m.contains("only supports versions 0-2"), "{m}");
    let (e, m) = update(
        &mut c,
        &[("transaction.version", 1, 2), ("no.such.feature", 1, 1)],
        false,
    );
    assert_eq!(e, invalid);
    assert!(m.contains("no.such.feature"), "{m}");
    let (e, _) = update(&mut c, &[("transaction.version", 1, 9)], false);
    assert_eq!(e, invalid);
    // Validating only changes nothing either.
    assert_eq!(update(&mut c, &[("transaction.version", 1, 2)], true).0, 0);
    assert_eq!(
        level(&mut c),
        (2, epoch),
        "refused or validated updates wrote nothing"
    );

    // A safe downgrade to 1, then an unsafe one to 0 (no level left), then back up to 2.
    assert_eq!(update(&mut c, &[("transaction.version", 1, 2)], false).0, 0);
    let (l, e1) = level(&mut c);
    assert_eq!(l, 1);
    assert!(e1 > epoch, "the features epoch moves with every change");
    assert_eq!(update(&mut c, &[("transaction.version", 0, 3)], false).0, 0);
    assert_eq!(level(&mut c).0, 0);
    let (e, m) = update(&mut c, &[("transaction.version", 1, 2)], false);
    assert_eq!(e, invalid);
    assert!(m.contains("newer version"), "{m}");
    assert_eq!(update(&mut c, &[("transaction.version", 2, 1)], false).0, 0);
    assert_eq!(level(&mut c).0, 2);

    // v0 says "downgrade" with a flag.
    let v0 = UpdateFeaturesRequest::default()
        .with_timeout_ms(30_000)
        .with_feature_updates(vec![update_features_request::FeatureUpdateKey::default()
            .with_feature(s("transaction.version"))
            .with_max_version_level(1)
            .with_allow_downgrade(true)]);
    let r: UpdateFeaturesResponse = c.send(ApiKey::UpdateFeatures, 0, &v0);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(level(&mut c).0, 1);
}

/// ApiVersions v3+ lists the cluster features: `transaction.version` supported up to 2
/// and, in a new cluster, finalized at 2 with an epoch of 0 or more (a Java or franz-go
/// client then uses transaction version 2); v0-2 carry no features.
#[test]
fn api_versions_lists_the_transaction_version_feature() {
    let b = Broker::start();
    let mut c = b.client();
    let r: ApiVersionsResponse = c.send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let supported: Vec<_> = r
        .supported_features
        .iter()
        .map(|f| (f.name.to_string(), f.min_version, f.max_version))
        .collect();
    assert_eq!(
        supported,
        [
            ("share.version".to_string(), 0, 1),
            ("transaction.version".to_string(), 0, 2)
        ]
    );
    let finalized: Vec<_> = r
        .finalized_features
        .iter()
        .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
        .collect();
    assert_eq!(
        finalized,
        [
            ("share.version".to_string(), 1, 1),
            ("transaction.version".to_string(), 2, 2)
        ]
    );
    assert!(
        r.finalized_features_epoch >= 0,
        "{}",
        r.finalized_features_epoch
    );
    let old: ApiVersionsResponse = c.send(ApiKey::ApiVersions, 2, &ApiVersionsRequest::default());
    assert!(old.supported_features.is_empty() && old.finalized_features.is_empty());
}
