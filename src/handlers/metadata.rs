//! Metadata: brokers, the controller, and topics with their partitions' leaders, replicas
//! and ISR. Requested topics that do not exist are created when the client allows it and
//! `auto.create.topics.enable` is on.

use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{MetadataRequest, MetadataResponse};

use super::RequestContext;
use super::{
    broker_id, str_bytes, topic_name, CLUSTER_OPERATIONS_ALL, OPERATIONS_UNKNOWN,
    TOPIC_OPERATIONS_ALL,
};
use crate::broker::authorizer::denied;
use crate::broker::Broker;
use crate::error::Error;
use crate::security::acl::{op, resource, CLUSTER_NAME};
use crate::topics::{validate_topic_name, Topic};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: MetadataRequest,
) -> MetadataResponse {
    // Authorized operations are reported from v8 when asked for; v0 has no null: an empty
    // list means every topic (v1+: null is all, empty is none).
    let with_ops = req.include_topic_authorized_operations && ctx.version >= 8;
    let access = ctx.access(broker);
    let ops = |name: &str| match with_ops {
        true => access.operations(resource::TOPIC, name, TOPIC_OPERATIONS_ALL),
        false => OPERATIONS_UNKNOWN,
    };
    let may_describe = |name: &str| access.allows(op::DESCRIBE, resource::TOPIC, name);
    let denied_topic =
        |name: Option<&str>, id| error_topic(name, id, denied(resource::TOPIC).code());
    let wanted = match req.topics {
        Some(t) if ctx.version == 0 && t.is_empty() => None,
        other => other,
    };
    let topics = match wanted {
        // Every topic the principal may describe; the others are left out silently.
        None => broker
            .catalog
            .all()
            .iter()
            .filter(|t| may_describe(&t.name))
            .map(|t| describe(t, ops(&t.name)))
            .collect(),
        Some(requested) => {
            // Before v4 the request has no flag and creation was always allowed.
            let allow_create = ctx.version < 4 || req.allow_auto_topic_creation;
            let mut out = Vec::with_capacity(requested.len());
            for r in requested {
                // A topic id, when set, is what counts, as in Kafka: the Java consumer asks
                // for the topics a regex subscription was assigned by id, with name "".
                let name = r.name.as_ref().map(|n| n.to_string());
                let Some(name) = name.filter(|_| r.topic_id.is_nil()) else {
                    out.push(match broker.catalog.get_by_id(r.topic_id) {
                        Some(t) if !may_describe(&t.name) => denied_topic(None, r.topic_id),
                        Some(t) => describe(&t, ops(&t.name)),
                        None => error_topic(None, r.topic_id, Error::UnknownTopicId.code()),
                    });
                    continue;
                };
                // A topic the principal may not describe is refused whether or not it
                // exists, and creating one needs CREATE on the cluster or the topic.
                if !may_describe(&name) {
                    out.push(denied_topic(Some(&name), uuid::Uuid::nil()));
                    continue;
                }
                let may_create = access.allows_cluster(op::CREATE)
                    || access.allows(op::CREATE, resource::TOPIC, &name);
                out.push(
                    lookup_or_create(broker, &name, allow_create, may_create, ops(&name)).await,
                );
            }
            out
        }
    };
    let topics = topics
        .into_iter()
        .map(|t| fit_topic(t, ctx.version))
        .collect();
    // In a cluster: every live broker; Kafka 4 names a live broker as the "controller" that
    // admin clients send controller-bound requests to (any broker forwards them).
    let brokers = broker.live_brokers(&ctx.conn.listener);
    let controller = broker.controller_for_clients(&brokers);
    MetadataResponse::default()
        .with_brokers(
            brokers
                .into_iter()
                .map(|(id, host, port)| {
                    MetadataResponseBroker::default()
                        .with_node_id(broker_id(id))
                        .with_host(str_bytes(host))
                        .with_port(port as i32)
                })
                .collect(),
        )
        .with_cluster_id((ctx.version >= 2).then(|| str_bytes(broker.cluster_id())))
        .with_controller_id(broker_id(if ctx.version >= 1 { controller } else { -1 }))
        .with_topics(topics)
        .with_cluster_authorized_operations(
            if req.include_cluster_authorized_operations && (8..=10).contains(&ctx.version) {
                access.operations(resource::CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS_ALL)
            } else {
                OPERATIONS_UNKNOWN
            },
        )
}

async fn lookup_or_create(
    broker: &Arc<Broker>,
    name: &str,
    allow_create: bool,
    may_create: bool,
    ops: i32,
) -> MetadataResponseTopic {
    if let Some(t) = broker.catalog.get(name) {
        return describe(&t, ops);
    }
    if let Err(e) = validate_topic_name(name) {
        return error_topic(Some(name), uuid::Uuid::nil(), e.code());
    }
    if !(allow_create && broker.config.auto_create_topics_enable) {
        return error_topic(
            Some(name),
            uuid::Uuid::nil(),
            Error::UnknownTopicOrPartition.code(),
        );
    }
    if !may_create {
        return error_topic(
            Some(name),
            uuid::Uuid::nil(),
            denied(resource::TOPIC).code(),
        );
    }
    match broker.auto_create(name).await {
        // Created synchronously, so it is ready to use right away.
        Ok(()) | Err(Error::TopicAlreadyExists(_)) => match broker.catalog.get(name) {
            Some(t) => describe(&t, ops),
            None => error_topic(
                Some(name),
                uuid::Uuid::nil(),
                Error::UnknownTopicOrPartition.code(),
            ),
        },
        Err(e) => {
            tracing::warn!(topic = name, error = %e, "auto-creation failed");
            error_topic(Some(name), uuid::Uuid::nil(), e.code())
        }
    }
}

/// Resets what `version` lacks: such fields must keep their defaults to be encodable.
fn fit_topic(mut t: MetadataResponseTopic, version: i16) -> MetadataResponseTopic {
    if version < 10 {
        t.topic_id = uuid::Uuid::nil();
    }
    if version < 8 {
        t.topic_authorized_operations = OPERATIONS_UNKNOWN;
    }
    if version < 7 {
        for p in t.partitions.iter_mut() {
            p.leader_epoch = -1;
        }
    }
    t
}

fn error_topic(name: Option<&str>, id: uuid::Uuid, code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code)
        .with_name(name.map(topic_name))
        .with_topic_id(id)
}

fn describe(t: &Topic, ops: i32) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&t.name)))
        .with_topic_id(t.id)
        .with_is_internal(t.is_internal())
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| {
                    let place = p.placement();
                    let code = if place.leader < 0 {
                        kafka_protocol::ResponseError::LeaderNotAvailable.code()
                    } else {
                        0
                    };
                    MetadataResponsePartition::default()
                        .with_error_code(code)
                        .with_partition_index(p.index)
                        .with_leader_id(broker_id(place.leader))
                        .with_leader_epoch(place.leader_epoch)
                        .with_replica_nodes(place.replicas.into_iter().map(broker_id).collect())
                        .with_isr_nodes(place.isr.into_iter().map(broker_id).collect())
                        .with_offline_replicas(place.offline.into_iter().map(broker_id).collect())
                })
                .collect(),
        )
        .with_topic_authorized_operations(ops)
}
