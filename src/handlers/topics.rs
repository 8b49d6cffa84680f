//! CreateTopics, DeleteTopics and CreatePartitions.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};
use kafka_protocol::ResponseError;

use super::topic_name;
use super::RequestContext;
use crate::broker::authorizer::denied;
use crate::broker::throttle::Kind;
use crate::broker::Broker;
use crate::controller::quotas::Applied;
use crate::error::{Error, Result};
use crate::handlers::configs::topic_entries;
use crate::replication::Layout;
use crate::security::acl::{op, resource};

/// The most partitions one CreateTopics or CreatePartitions request may add, as Kafka's
/// controller bounds them (`MAX_PARTITIONS_PER_BATCH`): more would hold the whole lot in
/// memory at once, in the controller and on every broker.
const PARTITIONS_PER_REQUEST_MAX: i64 = 10_000;

fn too_many_partitions() -> Error {
    Error::PolicyViolation("Excessively large number of partitions per request.".into())
}

/// KIP-599's `controller_mutation_rate` over one request. Strict from the versions Kafka
/// makes it so (a topic is refused with THROTTLING_QUOTA_EXCEEDED while the client's
/// partitions are used up, and no mutation is throttled otherwise); permissive before
/// (everything goes ahead and the response carries the throttle it earned). Each broker
/// keeps its own buckets, as it does for the byte rates.
struct Mutations<'a> {
    broker: &'a Broker,
    quota: Option<Applied>,
    strict: bool,
    throttle_ms: u64,
}

impl<'a> Mutations<'a> {
    fn new(broker: &'a Broker, ctx: &RequestContext<'_>, strict_since: i16) -> Self {
        let client_id = ctx.client_id.as_deref().unwrap_or("");
        Mutations {
            broker,
            quota: broker.client_quota(
                Kind::ControllerMutation,
                || ctx.conn.principal(),
                client_id,
            ),
            strict: ctx.version >= strict_since,
            throttle_ms: 0,
        }
    }

    /// The refusal of the next mutation, when the quota is strict and used up.
    fn refusal(&mut self) -> Option<Error> {
        let quota = self.quota.as_ref().filter(|_| self.strict)?;
        let ms = self
            .broker
            .throttles
            .mutations_exhausted(quota, crate::clock::now_ms_unsigned());
        self.throttle_ms = self.throttle_ms.max(ms);
        (ms > 0).then_some(Error::ThrottlingQuotaExceeded)
    }

    /// Counts `partitions` created or deleted.
    fn record(&mut self, partitions: usize) {
        if let Some(quota) = &self.quota {
            let ms = (self.broker.throttles).record_mutations(
                quota,
                partitions as f64,
                crate::clock::now_ms_unsigned(),
            );
            if !self.strict {
                self.throttle_ms = self.throttle_ms.max(ms);
            }
        }
    }

    /// The response's `throttle_time_ms`; the connection is muted for as long.
    fn throttle(self, ctx: &RequestContext<'_>) -> i32 {
        ctx.conn.mute_for(self.throttle_ms);
        self.throttle_ms.min(i32::MAX as u64) as i32
    }
}

pub async fn create(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    // Kafka's count: the default for -1, none for other values below 1 (refused one by one
    // below), else the assignment's partitions.
    let requested: i64 = req
        .topics
        .iter()
        .map(|t| match (t.assignments.is_empty(), t.num_partitions) {
            (false, _) => t.assignments.len() as i64,
            (true, -1) => broker.config.num_partitions as i64,
            (true, n) => n.max(0) as i64,
        })
        .sum();
    let over_bound = requested > PARTITIONS_PER_REQUEST_MAX;
    let mut seen = HashSet::new();
    let duplicates: HashSet<String> = req
        .topics
        .iter()
        .map(|t| t.name.to_string())
        .filter(|n| !seen.insert(n.clone()))
        .collect();
    // Kafka's check: CREATE on the cluster, or on each topic.
    let access = ctx.access(broker);
    let cluster_create = access.allows_cluster(op::CREATE);
    let mut mutations = Mutations::new(broker, ctx, 6);
    let mut results = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let name = t.name.to_string();
        let outcome = if duplicates.contains(&name) {
            Err(Error::InvalidRequest(format!(
                "topic '{name}' appears more than once in the request"
            )))
        } else if over_bound {
            Err(too_many_partitions())
        } else if !cluster_create && !access.allows(op::CREATE, resource::TOPIC, &name) {
            Err(denied(resource::TOPIC))
        } else if let Some(e) = mutations.refusal() {
            Err(e)
        } else {
            let created = create_one(broker, t, req.validate_only).await;
            if let (Ok((partitions, ..)), false) = (&created, req.validate_only) {
                mutations.record(*partitions as usize);
            }
            created
        };
        let r = CreatableTopicResult::default().with_name(t.name.clone());
        // Fields a version lacks must keep their defaults, or the response cannot be encoded.
        results.push(match outcome {
            Ok((partitions, rf, configs)) => {
                let id = broker
                    .catalog
                    .get(&name)
                    .filter(|_| !req.validate_only)
                    .map(|t| t.id);
                let r = if ctx.version >= 7 {
                    r.with_topic_id(id.unwrap_or_default())
                } else {
                    r
                };
                if ctx.version < 5 {
                    r
                } else if access.allows(op::DESCRIBE_CONFIGS, resource::TOPIC, &name) {
                    r.with_num_partitions(partitions)
                        .with_replication_factor(rf)
                        .with_configs(Some(configs))
                } else {
                    // As Kafka's controller: created, but what describing its configs would
                    // show is left out.
                    r.with_topic_config_error_code(ResponseError::TopicAuthorizationFailed.code())
                }
            }
            Err(e) => r.with_error_code(e.code()).with_error_message(e.message()),
        });
    }
    CreateTopicsResponse::default()
        .with_throttle_time_ms(mutations.throttle(ctx))
        .with_topics(results)
}

async fn create_one(
    broker: &Broker,
    t: &CreatableTopic,
    validate_only: bool,
) -> Result<(i32, i16, Vec<CreatableTopicConfigs>)> {
    let (partitions, rf) = if t.assignments.is_empty() {
        let p = if t.num_partitions == -1 {
            broker.config.num_partitions
        } else {
            t.num_partitions
        };
        let rf = if t.replication_factor == -1 {
            broker.config.default_replication_factor
        } else {
            t.replication_factor
        };
        (p, rf)
    } else {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err(Error::InvalidRequest(
                "both a replica assignment and a partition count or replication factor were given"
                    .into(),
            ));
        }
        let mut rf = None;
        for (i, a) in t.assignments.iter().enumerate() {
            if a.partition_index != i as i32 {
                return Err(Error::InvalidReplicaAssignment(
                    "partitions must be numbered 0..n in order".into(),
                ));
            }
            if *rf.get_or_insert(a.broker_ids.len()) != a.broker_ids.len() {
                return Err(Error::InvalidReplicaAssignment(
                    "all partitions need the same number of replicas".into(),
                ));
            }
        }
        (t.assignments.len() as i32, rf.unwrap_or(0) as i16)
    };
    let mut configs = BTreeMap::new();
    for c in &t.configs {
        let value = c.value.as_ref().ok_or_else(|| {
            Error::InvalidConfig(format!("null value for topic config {}", c.name))
        })?;
        configs.insert(c.name.to_string(), value.to_string());
    }
    let layout = if t.assignments.is_empty() {
        Layout::Spread {
            partitions,
            replication_factor: rf,
        }
    } else {
        Layout::Assigned(
            t.assignments
                .iter()
                .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                .collect(),
        )
    };
    broker
        .create_topic(&t.name, layout, configs.clone(), validate_only)
        .await?;
    let described = topic_entries(&configs, &broker.catalog.config(), None)
        .into_iter()
        .map(|c| {
            CreatableTopicConfigs::default()
                .with_name(c.name)
                .with_value(c.value)
                .with_read_only(c.read_only)
                .with_config_source(c.config_source)
                .with_is_sensitive(false)
        })
        .collect();
    Ok((partitions, rf, described))
}

pub async fn delete(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    // v6 names topics by name or id; earlier versions by name only.
    let targets: Vec<(Option<String>, uuid::Uuid)> = if ctx.version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    // Kafka's check: DELETE on each topic.
    let access = ctx.access(broker);
    let mut mutations = Mutations::new(broker, ctx, 5);
    let mut responses = Vec::with_capacity(targets.len());
    for (name, id) in targets {
        let resolved = match (&name, id.is_nil()) {
            (Some(n), _) => Ok(n.clone()),
            (None, false) => broker
                .catalog
                .get_by_id(id)
                .map(|t| t.name.clone())
                .ok_or(Error::UnknownTopicId),
            (None, true) => Err(Error::InvalidRequest(
                "neither a topic name nor an id was given".into(),
            )),
        };
        let result = match resolved {
            Ok(n) if !access.allows(op::DELETE, resource::TOPIC, &n) => {
                Err(denied(resource::TOPIC))
            }
            Ok(n) => match mutations.refusal() {
                Some(e) => Err(e),
                None => {
                    let partitions = broker.catalog.get(&n).map_or(0, |t| t.partitions.len());
                    let deleted = broker.delete_topic(&n).await;
                    if deleted.is_ok() {
                        mutations.record(partitions);
                    }
                    deleted.map(|id| (n, id))
                }
            },
            Err(e) => Err(e),
        };
        let mut r = match result {
            Ok((n, deleted)) => DeletableTopicResult::default()
                .with_name(Some(topic_name(&n)))
                .with_topic_id(deleted),
            Err(e) => DeletableTopicResult::default()
                .with_name(name.as_deref().map(topic_name))
                .with_topic_id(id)
                .with_error_code(e.code())
                .with_error_message(e.message()),
        };
        // Fields a version lacks must keep their defaults, or the response cannot be encoded.
        if ctx.version < 6 {
            r.topic_id = uuid::Uuid::nil();
        }
        if ctx.version < 5 {
            r.error_message = None;
        }
        responses.push(r);
    }
    DeleteTopicsResponse::default()
        .with_throttle_time_ms(mutations.throttle(ctx))
        .with_responses(responses)
}

pub async fn create_partitions(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    // Kafka's check: ALTER on each topic.
    let access = ctx.access(broker);
    let adding = |t: &CreatePartitionsTopic| {
        let now = broker
            .catalog
            .get(&t.name)
            .map_or(0, |x| x.partitions.len());
        (t.count as i64 - now as i64).max(0)
    };
    let added: i64 = req.topics.iter().map(adding).sum();
    let mut mutations = Mutations::new(broker, ctx, 3);
    let mut results = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let refused = if added > PARTITIONS_PER_REQUEST_MAX {
            Some(too_many_partitions())
        } else if !access.allows(op::ALTER, resource::TOPIC, &t.name) {
            Some(denied(resource::TOPIC))
        } else {
            mutations.refusal()
        };
        if let Some(e) = refused {
            results.push(
                CreatePartitionsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(e.code())
                    .with_error_message(e.message()),
            );
            continue;
        }
        // An empty list names no placement (some clients send one for null).
        let assignment = t.assignments.as_ref().filter(|a| !a.is_empty()).map(|a| {
            a.iter()
                .map(|x| x.broker_ids.iter().map(|b| b.0).collect())
                .collect()
        });
        let growth = adding(t) as usize;
        let result = broker
            .create_partitions(&t.name, t.count, assignment, req.validate_only)
            .await;
        if result.is_ok() && !req.validate_only {
            mutations.record(growth);
        }
        let r = CreatePartitionsTopicResult::default().with_name(t.name.clone());
        results.push(match result {
            Ok(()) => r,
            Err(e) => r.with_error_code(e.code()).with_error_message(e.message()),
        });
    }
    CreatePartitionsResponse::default()
        .with_throttle_time_ms(mutations.throttle(ctx))
        .with_results(results)
}
