//! Topic administration and cluster description against a real broker process.

mod common;

use common::{batch, name, Broker};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::ResponseError;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn metadata(
    c: &mut common::Client,
    topics: Option<Vec<&str>>,
    auto_create: bool,
) -> MetadataResponse {
    let req = MetadataRequest::default()
        .with_topics(topics.map(|ts| {
            ts.into_iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
                .collect()
        }))
        .with_allow_auto_topic_creation(auto_create);
    c.send(ApiKey::Metadata, 12, &req)
}

#[test]
fn metadata_lists_and_auto_creates_topics() {
    let b = Broker::start_with(&["num.partitions=3"]);
    let mut c = b.client();
    let m = metadata(&mut c, Some(vec!["auto"]), false);
    assert_eq!(
        m.topics[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    let m = metadata(&mut c, Some(vec!["auto"]), true);
    assert_eq!(m.topics[0].error_code, 0);
    assert_eq!(m.topics[0].partitions.len(), 3);
    assert!(!m.topics[0].topic_id.is_nil());
    assert_eq!(m.controller_id.0, 1);
    assert!(m.cluster_id.is_some());
    let p = &m.topics[0].partitions[0];
    assert_eq!(
        (p.leader_id.0, p.leader_epoch, p.isr_nodes.len()),
        (1, 0, 1)
    );
    let all = metadata(&mut c, None, false);
    assert_eq!(all.topics.len(), 1);
    let none = metadata(&mut c, Some(vec![]), false);
    assert!(none.topics.is_empty());
    let bad = metadata(&mut c, Some(vec!["no way"]), true);
    assert_eq!(
        bad.topics[0].error_code,
        ResponseError::InvalidTopicException.code()
    );

    // by topic id (v12+): the id counts whatever the name says; the Java consumer of a
    // regex subscription sends name "" with it
    let id = m.topics[0].topic_id;
    let by_id = |c: &mut common::Client, id, name_: Option<&str>| -> MetadataResponse {
        let req =
            MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
                .with_topic_id(id)
                .with_name(name_.map(name))]));
        c.send(ApiKey::Metadata, 12, &req)
    };
    for n in [None, Some("")] {
        let r = by_id(&mut c, id, n);
        assert_eq!(r.topics[0].error_code, 0, "name {n:?}");
        assert_eq!(r.topics[0].name.as_ref().map(|n| n.as_str()), Some("auto"));
        assert_eq!(r.topics[0].partitions.len(), 3);
    }
    let unknown = by_id(&mut c, uuid::Uuid::from_u128(7), Some(""));
    assert_eq!(
        unknown.topics[0].error_code,
        ResponseError::UnknownTopicId.code()
    );
}

#[test]
fn create_validate_delete_and_grow_topics() {
    let b = Broker::start();
    let mut c = b.client();
    let validate = CreateTopicsRequest::default()
        .with_validate_only(true)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name("v"))
            .with_num_partitions(-1)
            .with_replication_factor(-1)]);
    let r: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &validate);
    assert_eq!((r.topics[0].error_code, r.topics[0].num_partitions), (0, 1));
    assert!(
        metadata(&mut c, None, false).topics.is_empty(),
        "validate_only creates nothing"
    );

    assert_eq!(c.create_topic("g", 2, &[]), 0);
    assert_eq!(
        c.create_topic("g", 2, &[]),
        ResponseError::TopicAlreadyExists.code()
    );
    let rf3 = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name("rf3"))
        .with_num_partitions(1)
        .with_replication_factor(3)]);
    let r: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &rf3);
    assert_eq!(
        r.topics[0].error_code,
        ResponseError::InvalidReplicationFactor.code()
    );

    let grow = |count| {
        CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
            .with_name(name("g"))
            .with_count(count)])
    };
    let r: CreatePartitionsResponse = c.send(ApiKey::CreatePartitions, 3, &grow(5));
    assert_eq!(r.results[0].error_code, 0);
    let r: CreatePartitionsResponse = c.send(ApiKey::CreatePartitions, 3, &grow(3));
    assert_eq!(
        r.results[0].error_code,
        ResponseError::InvalidPartitions.code()
    );
    assert_eq!(
        metadata(&mut c, Some(vec!["g"]), false).topics[0]
            .partitions
            .len(),
        5
    );
    assert_eq!(c.produce("g", 4, batch(&["new"]), 1), (0, 0));

    let del = DeleteTopicsRequest::default().with_topic_names(vec![name("g"), name("nope")]);
    let r: DeleteTopicsResponse = c.send(ApiKey::DeleteTopics, 5, &del);
    assert_eq!(r.responses[0].error_code, 0);
    assert_eq!(
        r.responses[1].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    assert!(metadata(&mut c, None, false).topics.is_empty());
    // Recreated under the same name: empty, with a new id.
    assert_eq!(c.create_topic("g", 1, &[]), 0);
    assert_eq!(c.fetch("g", 0, 0).1, 0);
}

#[test]
fn deletion_can_be_disabled() {
    let b = Broker::start_with(&["delete.topic.enable=false"]);
    let mut c = b.client();
    c.create_topic("keep", 1, &[]);
    let r: DeleteTopicsResponse = c.send(
        ApiKey::DeleteTopics,
        5,
        &DeleteTopicsRequest::default().with_topic_names(vec![name("keep")]),
    );
    assert_eq!(
        r.responses[0].error_code,
        ResponseError::TopicDeletionDisabled.code()
    );
}

#[test]
fn configs_describe_with_sources_and_alter_persistently() {
    let mut b = Broker::start_with(&["log.retention.hours=2"]);
    let mut c = b.client();
    c.create_topic("cf", 1, &[("cleanup.policy", "delete")]);
    let describe = |c: &mut common::Client| -> DescribeConfigsResponse {
        c.send(
            ApiKey::DescribeConfigs,
            4,
            &DescribeConfigsRequest::default()
                .with_include_synonyms(true)
                .with_resources(vec![DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("cf"))]),
        )
    };
    let find = |r: &DescribeConfigsResponse, k: &str| {
        r.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == k)
            .cloned()
            .unwrap()
    };
    let r = describe(&mut c);
    assert_eq!(r.results[0].error_code, 0);
    let ret = find(&r, "retention.ms");
    assert_eq!(ret.value.as_deref(), Some("7200000"));
    assert_eq!(
        ret.config_source, 4,
        "set in the broker config: STATIC_BROKER_CONFIG"
    );
    assert_eq!(
        find(&r, "cleanup.policy").config_source,
        1,
        "topic override: DYNAMIC_TOPIC_CONFIG"
    );
    assert_eq!(find(&r, "segment.bytes").config_source, 5, "DEFAULT_CONFIG");

    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("cf"))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_config_operation(0)
                    .with_value(Some(s("1000"))),
                AlterableConfig::default()
                    .with_name(s("cleanup.policy"))
                    .with_config_operation(1),
            ]),
    ]);
    let r: IncrementalAlterConfigsResponse = c.send(ApiKey::IncrementalAlterConfigs, 1, &alter);
    assert_eq!(r.responses[0].error_code, 0);
    let bad = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("cf"))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("max.message.bytes"))
                .with_config_operation(0)
                .with_value(Some(s("lots")))]),
    ]);
    let r: IncrementalAlterConfigsResponse = c.send(ApiKey::IncrementalAlterConfigs, 1, &bad);
    assert_eq!(
        r.responses[0].error_code,
        ResponseError::InvalidConfig.code()
    );

    b.stop();
    b.restart();
    let mut c = b.client();
    let r = describe(&mut c);
    assert_eq!(find(&r, "retention.ms").value.as_deref(), Some("1000"));
    assert_eq!(find(&r, "retention.ms").config_source, 1);
    assert_eq!(find(&r, "cleanup.policy").config_source, 5);

    let legacy = AlterConfigsRequest::default().with_resources(vec![
        alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("cf"))
            .with_configs(vec![alter_configs_request::AlterableConfig::default()
                .with_name(s("retention.bytes"))
                .with_value(Some(s("4096")))]),
    ]);
    let r: AlterConfigsResponse = c.send(ApiKey::AlterConfigs, 2, &legacy);
    assert_eq!(r.responses[0].error_code, 0);
    let r = describe(&mut c);
    assert_eq!(find(&r, "retention.bytes").value.as_deref(), Some("4096"));
    assert_eq!(
        find(&r, "retention.ms").config_source,
        4,
        "AlterConfigs replaces the whole set"
    );

    let broker_cfg: DescribeConfigsResponse = c.send(
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s("1"))]),
    );
    let r = &broker_cfg.results[0];
    assert_eq!(r.error_code, 0);
    // Writable: the dynamic keys (the topics' defaults and the cleaner's settings).
    let writable: Vec<&str> = r
        .configs
        .iter()
        .filter(|c| !c.read_only)
        .map(|c| c.name.as_str())
        .collect();
    assert!(writable.contains(&"log.cleanup.policy"), "{writable:?}");
    assert!(writable.contains(&"log.cleaner.threads"), "{writable:?}");
    assert!(!writable.contains(&"num.partitions"), "{writable:?}");
    assert!(!writable.contains(&"log.dirs"), "{writable:?}");
    let unknown: DescribeConfigsResponse = c.send(
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("nope"))]),
    );
    assert_eq!(
        unknown.results[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
}

#[test]
fn delete_records_moves_the_log_start() {
    let b = Broker::start();
    let mut c = b.client();
    c.create_topic("dr", 1, &[]);
    for i in 0..4 {
        c.produce("dr", 0, batch(&[&format!("v{i}")]), 1);
    }
    let req = |offset| {
        DeleteRecordsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(name("dr"))
                .with_partitions(vec![DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(offset)])])
    };
    let r: DeleteRecordsResponse = c.send(ApiKey::DeleteRecords, 2, &req(2));
    assert_eq!(
        (
            r.topics[0].partitions[0].error_code,
            r.topics[0].partitions[0].low_watermark
        ),
        (0, 2)
    );
    assert_eq!(c.list_offset("dr", 0, -2).1, 2);
    assert_eq!(
        c.fetch("dr", 0, 1).0,
        ResponseError::OffsetOutOfRange.code()
    );
    assert_eq!(c.fetch("dr", 0, 2).2[0], (2, "v2".to_string()));
    let r: DeleteRecordsResponse = c.send(ApiKey::DeleteRecords, 2, &req(99));
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        ResponseError::OffsetOutOfRange.code()
    );
}

#[test]
fn cluster_log_dirs_topic_partitions_and_epochs() {
    let b = Broker::start();
    let mut c = b.client();
    c.create_topic("d", 3, &[]);
    c.produce("d", 1, batch(&["x", "y"]), 1);
    let r: DescribeClusterResponse = c.send(
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default(),
    );
    assert_eq!(
        (r.controller_id.0, r.brokers.len(), r.brokers[0].port),
        (1, 1, b.addr.port() as i32)
    );

    let r: DescribeLogDirsResponse = c.send(
        ApiKey::DescribeLogDirs,
        4,
        &DescribeLogDirsRequest::default().with_topics(None),
    );
    let parts = &r.results[0].topics[0].partitions;
    assert!(parts
        .iter()
        .any(|p| p.partition_index == 1 && p.partition_size > 0));

    let r: DescribeTopicPartitionsResponse = c.send(
        ApiKey::DescribeTopicPartitions,
        0,
        &DescribeTopicPartitionsRequest::default()
            .with_response_partition_limit(2)
            .with_topics(vec![
                describe_topic_partitions_request::TopicRequest::default().with_name(name("d")),
            ]),
    );
    assert_eq!(r.topics[0].partitions.len(), 2);
    assert_eq!(r.next_cursor.as_ref().map(|c| c.partition_index), Some(2));

    let r: OffsetForLeaderEpochResponse = c.send(
        ApiKey::OffsetForLeaderEpoch,
        2,
        &OffsetForLeaderEpochRequest::default().with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(name("d"))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(1)
                .with_current_leader_epoch(-1)
                .with_leader_epoch(0)])]),
    );
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.leader_epoch, p.end_offset), (0, 0, 2));
}

#[test]
fn throttles_are_refused_their_deletes_taken_and_one_node_has_nothing_to_reassign() {
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    let b = Broker::start();
    let mut c = b.client();
    let broker_op = |op: i8, value: Option<&str>| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(s("1"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s("leader.replication.throttled.rate"))
                    .with_config_operation(op)
                    .with_value(value.map(s))]),
        ])
    };
    // kafka-reassign-partitions --verify clears throttles that were never set: a no-op.
    let r: IncrementalAlterConfigsResponse =
        c.send(ApiKey::IncrementalAlterConfigs, 1, &broker_op(1, None));
    assert_eq!(r.responses[0].error_code, 0);
    let r: IncrementalAlterConfigsResponse = c.send(
        ApiKey::IncrementalAlterConfigs,
        1,
        &broker_op(0, Some("1000")),
    );
    assert_eq!(
        r.responses[0].error_code,
        ResponseError::InvalidRequest.code()
    );
    assert!(r.responses[0]
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("Cannot update these configs dynamically")));

    assert_eq!(c.create_topic("moves", 1, &[]), 0);
    let alter = |c: &mut common::Client, topic: &str, replicas: Option<Vec<i32>>| {
        let req = AlterPartitionReassignmentsRequest::default().with_topics(vec![
            ReassignableTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![ReassignablePartition::default()
                    .with_partition_index(0)
                    .with_replicas(replicas.map(|r| r.into_iter().map(BrokerId).collect()))]),
        ]);
        let r: AlterPartitionReassignmentsResponse =
            c.send(ApiKey::AlterPartitionReassignments, 0, &req);
        let p = &r.responses[0].partitions[0];
        (
            p.error_code,
            p.error_message.as_deref().unwrap_or("").to_string(),
        )
    };
    assert_eq!(alter(&mut c, "moves", Some(vec![1])).0, 0, "already there");
    let (code, msg) = alter(&mut c, "moves", Some(vec![2]));
    assert_eq!(code, ResponseError::InvalidReplicaAssignment.code());
    assert!(msg.contains("broker 2"), "{msg}");
    assert_eq!(
        alter(&mut c, "moves", None).0,
        ResponseError::NoReassignmentInProgress.code()
    );
    assert_eq!(
        alter(&mut c, "nope", Some(vec![1])).0,
        ResponseError::UnknownTopicOrPartition.code()
    );
    let listed: ListPartitionReassignmentsResponse = c.send(
        ApiKey::ListPartitionReassignments,
        0,
        &ListPartitionReassignmentsRequest::default(),
    );
    assert_eq!(listed.error_code, 0);
    assert!(listed.topics.is_empty());
}

/// The broker resource lists every key Cairn accepts, with Kafka's sources and synonyms:
/// a key set in the config is STATIC_BROKER_CONFIG (4), one left alone DEFAULT_CONFIG (5).
#[test]
fn broker_configs_describe_every_key_with_sources_and_synonyms() {
    let b = Broker::start_with(&["log.retention.hours=2"]);
    let mut c = b.client();
    let describe = |c: &mut common::Client, extras: bool| -> DescribeConfigsResponse {
        c.send(
            ApiKey::DescribeConfigs,
            4,
            &DescribeConfigsRequest::default()
                .with_include_synonyms(extras)
                .with_include_documentation(extras)
                .with_resources(vec![DescribeConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(s("1"))]),
        )
    };
    let r = describe(&mut c, true);
    assert_eq!(r.results[0].error_code, 0);
    let find = |r: &DescribeConfigsResponse, k: &str| {
        r.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} is not described"))
    };
    for (key, value, source, read_only) in [
        ("unclean.leader.election.enable", "false", 5, true),
        ("replica.lag.time.max.ms", "30000", 5, true),
        ("log.retention.hours", "2", 4, false),
        ("log.dirs", b.dir.to_str().unwrap(), 4, true),
        ("metrics.listener", "none", 4, true),
    ] {
        let e = find(&r, key);
        assert_eq!(e.value.as_deref(), Some(value), "{key}");
        assert_eq!(e.config_source, source, "{key}");
        assert_eq!(
            e.read_only, read_only,
            "{key}: only dynamic keys are writable"
        );
        assert!(e.documentation.is_some_and(|d| !d.is_empty()), "{key}");
    }
    let retention = find(&r, "log.retention.ms");
    assert_eq!(retention.value.as_deref(), Some("7200000"));
    assert_eq!(retention.config_source, 4);
    assert_eq!(retention.config_type, 5, "LONG");
    let synonyms: Vec<(&str, Option<&str>, i8)> = retention
        .synonyms
        .iter()
        .map(|s| (s.name.as_str(), s.value.as_deref(), s.source))
        .collect();
    assert_eq!(
        synonyms,
        vec![
            ("log.retention.hours", Some("2"), 4),
            ("log.retention.hours", Some("168"), 5),
        ]
    );

    let plain = describe(&mut c, false);
    assert_eq!(plain.results[0].configs.len(), r.results[0].configs.len());
    assert!(plain.results[0]
        .configs
        .iter()
        .all(|c| c.synonyms.is_empty() && c.documentation.is_none()));
}

/// IncrementalAlterConfigs reads a topic's overrides, applies its operations and writes the
/// whole set back. Many at once, each SETting a key of its own, must all land: none may
/// write back a set read before another one's write.
#[test]
fn concurrent_incremental_alters_keep_every_key() {
    let b = Broker::start();
    let mut c = b.client();
    c.create_topic("race", 1, &[]);
    let settings: &[(&str, &str)] = &[
        ("cleanup.policy", "compact"),
        ("compression.type", "zstd"),
        ("delete.retention.ms", "1000"),
        ("file.delete.delay.ms", "1000"),
        ("flush.ms", "1000"),
        ("index.interval.bytes", "1000"),
        ("local.retention.bytes", "1000"),
        ("local.retention.ms", "1000"),
        ("max.compaction.lag.ms", "1000"),
        ("max.message.bytes", "100000"),
        ("message.timestamp.after.max.ms", "1000"),
        ("message.timestamp.before.max.ms", "1000"),
        ("min.cleanable.dirty.ratio", "0.3"),
        ("min.compaction.lag.ms", "1000"),
        ("preallocate", "true"),
        ("retention.bytes", "1000000"),
        ("retention.ms", "100000000"),
        ("segment.bytes", "2097152"),
        ("segment.index.bytes", "1000"),
        ("segment.jitter.ms", "1"),
        ("segment.ms", "100000"),
    ];
    let alter = |configs: Vec<AlterableConfig>| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("race"))
                .with_configs(configs),
        ])
    };
    // Several rounds, because one round may happen to be served in order.
    for round in 0..5 {
        let start = std::sync::Barrier::new(settings.len());
        std::thread::scope(|scope| {
            for (key, value) in settings {
                let (start, addr) = (&start, b.addr);
                scope.spawn(move || {
                    let mut c = common::Client::connect(addr);
                    let set = alter(vec![AlterableConfig::default()
                        .with_name(s(key))
                        .with_config_operation(0)
                        .with_value(Some(s(value)))]);
                    let frame = c.frame(ApiKey::IncrementalAlterConfigs, 1, &set);
                    start.wait();
                    c.send_raw(&frame);
                    let mut body = c.read_frame().expect("a response");
                    let version = ApiKey::IncrementalAlterConfigs.response_header_version(1);
                    ResponseHeader::decode(&mut body, version).unwrap();
                    let r = IncrementalAlterConfigsResponse::decode(&mut body, 1).unwrap();
                    assert_eq!(r.responses[0].error_code, 0, "SET {key}");
                });
            }
        });
        let described: DescribeConfigsResponse = c.send(
            ApiKey::DescribeConfigs,
            4,
            &DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("race")),
            ]),
        );
        let overridden: Vec<&str> = described.results[0]
            .configs
            .iter()
            .filter(|c| c.config_source == 1)
            .map(|c| c.name.as_str())
            .collect();
        let lost: Vec<&str> = settings
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| !overridden.contains(k))
            .collect();
        assert!(lost.is_empty(), "round {round}: lost {lost:?}");
        // Back to no overrides for the next round.
        let clear = alter(
            settings
                .iter()
                .map(|(k, _)| {
                    AlterableConfig::default()
                        .with_name(s(k))
                        .with_config_operation(1)
                })
                .collect(),
        );
        let r: IncrementalAlterConfigsResponse = c.send(ApiKey::IncrementalAlterConfigs, 1, &clear);
        assert_eq!(r.responses[0].error_code, 0);
    }
}

/// AlterClientQuotas and DescribeClientQuotas (what `kafka-configs --entity-type
/// users|clients|ips` sends): quotas are checked as Kafka's controller checks them, kept in
/// the metadata log across a restart, filtered as Kafka's image filters them, and removed.
#[test]
fn client_quotas_are_set_described_kept_and_removed() {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;

    let entry = |entity: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]| {
        EntryData::default()
            .with_entity(
                entity
                    .iter()
                    .map(|(t, n)| {
                        EntityData::default()
                            .with_entity_type(s(t))
                            .with_entity_name(n.map(s))
                    })
                    .collect(),
            )
            .with_ops(
                ops.iter()
                    .map(|(k, v)| {
                        OpData::default()
                            .with_key(s(k))
                            .with_value(v.unwrap_or(0.0))
                            .with_remove(v.is_none())
                    })
                    .collect(),
            )
    };
    let alter = |c: &mut common::Client, entries: Vec<EntryData>, validate_only: bool| {
        let r: AlterClientQuotasResponse = c.send(
            ApiKey::AlterClientQuotas,
            1,
            &AlterClientQuotasRequest::default()
                .with_entries(entries)
                .with_validate_only(validate_only),
        );
        r.entries.iter().map(|e| e.error_code).collect::<Vec<_>>()
    };
    // Each entity as (type=name|default ...) -> sorted "key=value" list.
    let describe = |c: &mut common::Client, components: &[(&str, i8, Option<&str>)], strict| {
        let r: DescribeClientQuotasResponse = c.send(
            ApiKey::DescribeClientQuotas,
            1,
            &DescribeClientQuotasRequest::default()
                .with_components(
                    components
                        .iter()
                        .map(|(t, m, n)| {
                            ComponentData::default()
                                .with_entity_type(s(t))
                                .with_match_type(*m)
                                .with_match(n.map(s))
                        })
                        .collect(),
                )
                .with_strict(strict),
        );
        let mut found: Vec<String> = r
            .entries
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        let mut who: Vec<String> = e
                            .entity
                            .iter()
                            .map(|d| match &d.entity_name {
                                Some(n) => format!("{}={n}", d.entity_type.as_str()),
                                None => format!("{}=<default>", d.entity_type.as_str()),
                            })
                            .collect();
                        who.sort();
                        let mut values: Vec<String> = e
                            .values
                            .iter()
                            .map(|v| format!("{}={}", v.key.as_str(), v.value))
                            .collect();
                        values.sort();
                        format!("{} {}", who.join(","), values.join(","))
                    })
                    .collect()
            })
            .unwrap_or_else(|| vec![format!("error {}", r.error_code)]);
        found.sort();
        found
    };

    let mut b = Broker::start();
    let mut c = b.client();
    assert_eq!(describe(&mut c, &[], false), Vec::<String>::new());
    let codes = alter(
        &mut c,
        vec![
            entry(
                &[("user", Some("alice"))],
                &[
                    ("producer_byte_rate", Some(1024.0)),
                    ("consumer_byte_rate", Some(2048.0)),
                ],
            ),
            entry(
                &[("client-id", None)],
                &[("request_percentage", Some(12.5))],
            ),
            entry(
                &[("user", Some("alice")), ("client-id", Some("app"))],
                &[("controller_mutation_rate", Some(3.0))],
            ),
            entry(
                &[("ip", Some("10.1.2.3"))],
                &[("connection_creation_rate", Some(7.0))],
            ),
            // Refused, each alone, as Kafka's controller refuses them.
            entry(
                &[("user", Some("bob"))],
                &[("producer_byte_rate", Some(1.5))],
            ),
            entry(&[("user", Some("carol"))], &[("no_such_rate", Some(1.0))]),
            entry(
                &[("user", Some("dave"))],
                &[("consumer_byte_rate", Some(f64::NAN))],
            ),
            entry(
                &[("group", Some("g"))],
                &[("producer_byte_rate", Some(1.0))],
            ),
            entry(&[("ip", Some("10.1.2.3")), ("user", None)], &[]),
            entry(&[("user", Some(""))], &[("producer_byte_rate", Some(1.0))]),
        ],
        false,
    );
    assert_eq!(codes, [0, 0, 0, 0, 42, 42, 42, 42, 42, 42]);
    // Checked only: nothing changes.
    let codes = alter(
        &mut c,
        vec![entry(
            &[("user", Some("erin"))],
            &[("producer_byte_rate", Some(9.0))],
        )],
        true,
    );
    assert_eq!(codes, [0]);

    let all = [
        "client-id=<default> request_percentage=12.5",
        "client-id=app,user=alice controller_mutation_rate=3",
        "ip=10.1.2.3 connection_creation_rate=7",
        "user=alice consumer_byte_rate=2048,producer_byte_rate=1024",
    ];
    assert_eq!(describe(&mut c, &[], false), all);
    // Restarted, the quotas come back from the metadata log.
    b.stop();
    b.restart();
    let mut c = b.client();
    assert_eq!(describe(&mut c, &[], false), all);
    // Kafka's filters: a name, the default, any name; strict leaves out wider entities.
    assert_eq!(
        describe(&mut c, &[("user", 0, Some("alice"))], false),
        [all[1], all[3]]
    );
    assert_eq!(
        describe(&mut c, &[("user", 0, Some("alice"))], true),
        [all[3]]
    );
    assert_eq!(describe(&mut c, &[("client-id", 1, None)], false), [all[0]]);
    assert_eq!(describe(&mut c, &[("client-id", 2, None)], true), [all[0]]);
    assert_eq!(describe(&mut c, &[("ip", 2, None)], false), [all[2]]);
    // A bad filter gets Kafka's errors.
    assert_eq!(
        describe(&mut c, &[("ip", 2, None), ("user", 2, None)], false),
        ["error 42"]
    );
    assert_eq!(describe(&mut c, &[("group", 2, None)], false), ["error 35"]);
    assert_eq!(describe(&mut c, &[("user", 0, None)], false), ["error 42"]);

    // Removed: one value, then the entity's last.
    let codes = alter(
        &mut c,
        vec![
            entry(&[("user", Some("alice"))], &[("producer_byte_rate", None)]),
            entry(&[("client-id", None)], &[("request_percentage", None)]),
        ],
        false,
    );
    assert_eq!(codes, [0, 0]);
    assert_eq!(
        describe(&mut c, &[], false),
        [all[1], all[2], "user=alice consumer_byte_rate=2048"]
    );
}

/// KIP-599's `controller_mutation_rate`: partitions created, added or deleted are taken
/// from a bucket of the rate times eleven seconds. From CreateTopics v6, CreatePartitions
/// v3 and DeleteTopics v5 a used-up bucket refuses each further topic with
/// THROTTLING_QUOTA_EXCEEDED and its throttle; older versions go ahead and are throttled.
/// The rate is so low (one partition per 100 s) that no wait on a slow machine refills it.
#[test]
fn controller_mutation_quotas_refuse_new_clients_and_throttle_old_ones() {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    let broker = Broker::start();
    let mut c = broker.client();
    let quota = EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(s("client-id"))
            .with_entity_name(Some(s("cairn-tests")))])
        .with_ops(vec![OpData::default()
            .with_key(s("controller_mutation_rate"))
            .with_value(0.01)]);
    let r: AlterClientQuotasResponse = c.send(
        ApiKey::AlterClientQuotas,
        1,
        &AlterClientQuotasRequest::default().with_entries(vec![quota]),
    );
    assert_eq!(r.entries[0].error_code, 0, "{r:?}");

    let create = |version: i16, topics: &[(&str, i32)]| {
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(
                topics
                    .iter()
                    .map(|(t, p)| {
                        CreatableTopic::default()
                            .with_name(name(t))
                            .with_num_partitions(*p)
                            .with_replication_factor(1)
                    })
                    .collect(),
            );
        // Each on its own connection: a throttle mutes the one it came on.
        let r: CreateTopicsResponse = broker.client().send(ApiKey::CreateTopics, version, &req);
        r
    };
    let throttled = ResponseError::ThrottlingQuotaExceeded.code();
    // The bucket holds 0.11 partitions: the first topic is taken (it was not used up yet),
    // leaving 1.89 missing, which takes 189 s to refill; the second is refused.
    let r = create(7, &[("mut-a", 2), ("mut-b", 1)]);
    assert_eq!(r.topics[0].error_code, 0, "{r:?}");
    assert_eq!(r.topics[1].error_code, throttled, "{r:?}");
    assert_eq!(
        r.topics[1].error_message.as_deref(),
        Some("The throttling quota has been exceeded.")
    );
    assert!(
        (100_000..=189_000).contains(&r.throttle_time_ms),
        "{}",
        r.throttle_time_ms
    );
    // Before v6 the topic is created, and the response throttled.
    let r = create(5, &[("mut-c", 1)]);
    assert_eq!(r.topics[0].error_code, 0, "{r:?}");
    assert!(r.throttle_time_ms > 100_000, "{}", r.throttle_time_ms);

    let grow = |version: i16| {
        let req = CreatePartitionsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(name("mut-a"))
                .with_count(3 + version as i32)]);
        let r: CreatePartitionsResponse =
            broker
                .client()
                .send(ApiKey::CreatePartitions, version, &req);
        r
    };
    let r = grow(3);
    assert_eq!(r.results[0].error_code, throttled, "{r:?}");
    assert!(r.throttle_time_ms > 100_000, "{}", r.throttle_time_ms);
    let r = grow(2);
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    assert!(r.throttle_time_ms > 100_000, "{}", r.throttle_time_ms);

    let delete = |version: i16, topic: &str| {
        let req = DeleteTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topic_names(vec![name(topic)]);
        let r: DeleteTopicsResponse = broker.client().send(ApiKey::DeleteTopics, version, &req);
        r
    };
    let r = delete(5, "mut-a");
    assert_eq!(r.responses[0].error_code, throttled, "{r:?}");
    let r = delete(4, "mut-c");
    assert_eq!(r.responses[0].error_code, 0, "{r:?}");
    assert!(r.throttle_time_ms > 100_000, "{}", r.throttle_time_ms);

    // What happened: a and c were created, b was not, a grew to 5 and c was deleted.
    let m = metadata(&mut broker.client(), None, false);
    let mut topics: Vec<(String, usize)> = m
        .topics
        .iter()
        .map(|t| (t.name.as_ref().unwrap().to_string(), t.partitions.len()))
        .collect();
    topics.sort();
    assert_eq!(topics, [("mut-a".to_string(), 5)]);
}
