//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs. Topic configs are described
//! with their defaults and the right `source`; topic changes are validated and persisted.
//! Broker configs are described layer by layer (this broker's dynamic ones, the cluster's
//! dynamic defaults, the static ones); the dynamic keys (`config::keys::DYNAMIC`: the
//! topics' defaults and the cleaner's settings) change through the controller, the others
//! are read-only. Group configs (KIP-848, KIP-932) are described over the broker's
//! defaults and changed through the controller.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use super::RequestContext;
use crate::broker::authorizer::{denied, Access};
use crate::broker::Broker;
use crate::config::{self, Config};
use crate::error::{Error, Result};
use crate::group_config;
use crate::security::acl::{op, resource};
use crate::topic_config::{self, Kind, Source, KEYS};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_GROUP: i8 = 32;

/// Kafka's checks on a config resource: `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on
/// the topic, the group, or for a broker the cluster.
fn authorized(access: &Access, operation: i8, resource_type: i8, name: &str) -> Result<()> {
    let (rt, name) = match resource_type {
        RESOURCE_TOPIC => (resource::TOPIC, name),
        RESOURCE_GROUP => (resource::GROUP, name),
        _ => (resource::CLUSTER, crate::security::acl::CLUSTER_NAME),
    };
    match access.allows(operation, rt, name) {
        true => Ok(()),
        false => Err(denied(rt)),
    }
}

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// Describes a topic's configs: every key (or those in `only`), overrides first-class.
pub fn topic_entries(
    overrides: &BTreeMap<String, String>,
    broker: &Config,
    only: Option<&[StrBytes]>,
) -> Vec<DescribeConfigsResourceResult> {
    KEYS.iter()
        .filter(|k| only.is_none_or(|o| o.iter().any(|n| n.as_str() == k.name)))
        .map(|k| {
            let (default, default_source) = topic_config::default_value(k, broker);
            let mut synonyms = Vec::new();
            let (value, source) = match overrides.get(k.name) {
                Some(v) => {
                    synonyms.push(synonym(k.name, v, Source::DynamicTopic));
                    (v.clone(), Source::DynamicTopic)
                }
                None => (default.clone(), default_source),
            };
            if let Some(bk) = k.broker_key.filter(|_| default_source != Source::Default) {
                synonyms.push(synonym(bk, &default, default_source));
            }
            synonyms.push(synonym(
                k.broker_key.unwrap_or(k.name),
                k.default,
                Source::Default,
            ));
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(k.name))
                .with_value(Some(str_bytes(value)))
                .with_read_only(false)
                .with_config_source(source as i8)
                .with_is_sensitive(false)
                .with_synonyms(synonyms)
                .with_config_type(k.kind as i8)
        })
        .collect()
}

/// Describes a group's configs: every group key (or those in `only`), set ones first-class.
fn group_entries(
    overrides: &BTreeMap<String, String>,
    broker: &Config,
    only: Option<&[StrBytes]>,
) -> Vec<DescribeConfigsResourceResult> {
    group_config::KEYS
        .iter()
        .filter(|k| only.is_none_or(|o| o.iter().any(|n| n.as_str() == k.name)))
        .map(|k| {
            let (default, default_source) = group_config::default_value(k, broker);
            let mut synonyms = Vec::new();
            let (value, source) = match overrides.get(k.name) {
                Some(v) => {
                    synonyms.push(synonym(k.name, v, Source::DynamicGroup));
                    (v.clone(), Source::DynamicGroup)
                }
                None => (default.clone(), default_source),
            };
            synonyms.push(synonym(
                k.broker_key.unwrap_or(k.name),
                &default,
                default_source,
            ));
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(k.name))
                .with_value(Some(str_bytes(value)))
                .with_read_only(false)
                .with_config_source(source as i8)
                .with_is_sensitive(false)
                .with_synonyms(synonyms)
                .with_config_type(k.kind as i8)
                .with_documentation(Some(str_bytes(k.doc)))
        })
        .collect()
}

fn synonym(name: &str, value: &str, source: Source) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source as i8)
}

/// The broker's settings as DescribeConfigs shows them: every key Cairn accepts, the
/// dynamic ones writable; for the cluster's defaults (`default`, an empty resource name),
/// only the keys set there, as Kafka shows them.
fn broker_entries(
    c: &Config,
    default: bool,
    only: Option<&[StrBytes]>,
) -> Vec<DescribeConfigsResourceResult> {
    config::keys::KEYS
        .iter()
        .filter(|k| only.is_none_or(|o| o.iter().any(|n| n.as_str() == k.name)))
        .filter(|k| !default || c.layers.cluster.contains_key(k.name))
        .map(|k| {
            let mut d = config::keys::describe(k, c);
            if default {
                d.synonyms
                    .retain(|s| s.source == Source::DynamicDefaultBroker && s.name == k.name);
                d.value = d.synonyms.first().map(|s| s.value.clone());
                d.source = Source::DynamicDefaultBroker;
            }
            // Secrets are shown as set or not, never their value, as Kafka shows them.
            let sensitive = k.kind == config::keys::Kind::Password;
            let shown = |v: Option<String>| v.filter(|_| !sensitive).map(str_bytes);
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(k.name))
                .with_value(shown(d.value))
                .with_read_only(!config::keys::is_dynamic(k.name))
                .with_config_source(d.source as i8)
                .with_is_sensitive(sensitive)
                .with_synonyms(
                    d.synonyms
                        .iter()
                        .map(|s| {
                            synonym(s.name, &s.value, s.source)
                                .with_value(shown(Some(s.value.clone())))
                        })
                        .collect(),
                )
                .with_config_type(k.kind as i8)
                .with_documentation(Some(str_bytes(k.doc)))
        })
        .collect()
}

pub async fn describe(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let access = ctx.access(broker);
    let results = req
        .resources
        .iter()
        .map(|r| {
            let base = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            // Null asks for every config; so does an empty list (clients send either).
            let only = r.configuration_keys.as_deref().filter(|k| !k.is_empty());
            let allowed = authorized(
                &access,
                op::DESCRIBE_CONFIGS,
                r.resource_type,
                &r.resource_name,
            );
            let found = match r.resource_type {
                _ if allowed.is_err() => allowed.map(|_| Vec::new()),
                RESOURCE_TOPIC => broker
                    .catalog
                    .get(r.resource_name.as_str())
                    .map(|t| topic_entries(&t.overrides, &broker.catalog.config(), only))
                    .ok_or(Error::UnknownTopicOrPartition),
                RESOURCE_BROKER => check_broker_name(broker, r.resource_name.as_str()).map(|_| {
                    broker_entries(&broker.catalog.config(), r.resource_name.is_empty(), only)
                }),
                RESOURCE_GROUP => Ok(group_entries(
                    &broker.group_configs(r.resource_name.as_str()),
                    &broker.config,
                    only,
                )),
                other => Err(Error::InvalidRequest(format!(
                    "config resource type {other} is not supported"
                ))),
            };
            match found {
                Ok(mut configs) => {
                    if !req.include_synonyms || ctx.version < 1 {
                        configs.iter_mut().for_each(|c| c.synonyms.clear());
                    }
                    if !req.include_documentation || ctx.version < 3 {
                        configs.iter_mut().for_each(|c| c.documentation = None);
                    }
                    if ctx.version < 3 {
                        // v1-2 have no type; it must keep its default to be encodable.
                        configs.iter_mut().for_each(|c| c.config_type = 0);
                    }
                    base.with_configs(configs)
                }
                Err(e) => base
                    .with_error_code(e.code())
                    .with_error_message(e.message()),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn check_broker_name(broker: &Broker, name: &str) -> Result<()> {
    if name.is_empty() || name == broker.node_id().to_string() {
        Ok(())
    } else {
        Err(Error::InvalidRequest(format!(
            "unexpected broker id {name}: this is broker {}",
            broker.node_id()
        )))
    }
}

pub async fn alter(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let access = ctx.access(broker);
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in &req.resources {
        let allowed = authorized(
            &access,
            op::ALTER_CONFIGS,
            r.resource_type,
            &r.resource_name,
        );
        // AlterConfigs replaces the whole set of a topic's or group's configs.
        let configs: BTreeMap<String, String> = r
            .configs
            .iter()
            .filter_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| (c.name.to_string(), v.to_string()))
            })
            .collect();
        let name = r.resource_name.as_str();
        let result = match r.resource_type {
            _ if allowed.is_err() => allowed,
            RESOURCE_TOPIC | RESOURCE_GROUP => {
                // Serialised with IncrementalAlterConfigs, whose read-modify-write would
                // otherwise write back a set read before this replacement.
                let _serialised = broker.catalog.config_changes.lock().await;
                match r.resource_type {
                    RESOURCE_TOPIC => {
                        broker
                            .set_topic_configs(name, configs, req.validate_only)
                            .await
                    }
                    _ => {
                        broker
                            .set_group_configs(name, configs, req.validate_only)
                            .await
                    }
                }
            }
            RESOURCE_BROKER => match check_broker_name(broker, name) {
                Ok(()) => {
                    let _serialised = broker.catalog.config_changes.lock().await;
                    broker
                        .set_broker_configs(name, configs, req.validate_only)
                        .await
                }
                Err(e) => Err(e),
            },
            other => Err(Error::InvalidRequest(format!(
                "config resource type {other} is not supported"
            ))),
        };
        let resp = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        responses.push(match result {
            Ok(()) => resp,
            Err(e) => resp
                .with_error_code(e.code())
                .with_error_message(e.message()),
        });
    }
    AlterConfigsResponse::default().with_responses(responses)
}

pub async fn incremental_alter(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let access = ctx.access(broker);
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in &req.resources {
        let allowed = authorized(
            &access,
            op::ALTER_CONFIGS,
            r.resource_type,
            &r.resource_name,
        );
        let result = match r.resource_type {
            _ if allowed.is_err() => allowed,
            RESOURCE_TOPIC => {
                alter_topic_incrementally(
                    broker,
                    r.resource_name.as_str(),
                    &r.configs,
                    req.validate_only,
                )
                .await
            }
            RESOURCE_GROUP => {
                alter_group_incrementally(
                    broker,
                    r.resource_name.as_str(),
                    &r.configs,
                    req.validate_only,
                )
                .await
            }
            RESOURCE_BROKER => {
                alter_broker_incrementally(
                    broker,
                    r.resource_name.as_str(),
                    &r.configs,
                    req.validate_only,
                )
                .await
            }
            other => Err(Error::InvalidRequest(format!(
                "config resource type {other} is not supported"
            ))),
        };
        let resp = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        responses.push(match result {
            Ok(()) => resp,
            Err(e) => resp
                .with_error_code(e.code())
                .with_error_message(e.message()),
        });
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// Reads a topic's overrides, applies `ops` and writes the result, holding
/// `config_changes` throughout so no other change comes between the read and the write.
async fn alter_topic_incrementally(
    broker: &Broker,
    name: &str,
    ops: &[AlterableConfig],
    validate_only: bool,
) -> Result<()> {
    let _serialised = broker.catalog.config_changes.lock().await;
    let topic = broker
        .catalog
        .get(name)
        .ok_or(Error::UnknownTopicOrPartition)?;
    let live = broker.catalog.config();
    let next = apply_ops(&topic.overrides, ops, |name| {
        let key = topic_config::lookup(name)
            .ok_or_else(|| Error::InvalidConfig(format!("unknown topic config {name}")))?;
        Ok((key.kind, topic_config::default_value(key, &live).0))
    })?;
    broker
        .set_topic_configs(&topic.name, next, validate_only)
        .await
}

/// Reads a group's configs, applies `ops` (SET and DELETE: group configs are not lists)
/// and writes the result, serialised with every other config change.
async fn alter_group_incrementally(
    broker: &Broker,
    group: &str,
    ops: &[AlterableConfig],
    validate_only: bool,
) -> Result<()> {
    let _serialised = broker.catalog.config_changes.lock().await;
    let mut next = broker.group_configs(group);
    for op in ops {
        let name = op.name.to_string();
        if group_config::lookup(&name).is_none() {
            return Err(group_config::unknown(&name));
        }
        match (op.config_operation, &op.value) {
            (OP_SET, Some(v)) => {
                next.insert(name, v.to_string());
            }
            (OP_SET, None) => {
                return Err(Error::InvalidConfig(format!("SET of {name} needs a value")))
            }
            (OP_DELETE, _) => {
                next.remove(&name);
            }
            (OP_APPEND | OP_SUBTRACT, _) => {
                return Err(Error::InvalidConfig(format!(
                    "{name} is not a list: APPEND and SUBTRACT do not apply"
                )))
            }
            (other, _) => {
                return Err(Error::InvalidRequest(format!(
                    "unknown config operation {other}"
                )))
            }
        }
    }
    broker.set_group_configs(group, next, validate_only).await
}

/// Reads the dynamic configs of broker `name` ("" for the cluster's defaults), applies
/// `ops` and writes the result, serialised with every other config change. Deleting a key
/// that is not set does nothing, as in Kafka (kafka-reassign-partitions clears its
/// throttles this way).
async fn alter_broker_incrementally(
    broker: &Broker,
    name: &str,
    ops: &[AlterableConfig],
    validate_only: bool,
) -> Result<()> {
    check_broker_name(broker, name)?;
    let _serialised = broker.catalog.config_changes.lock().await;
    let live = broker.catalog.config();
    let current = match name.is_empty() {
        true => &live.layers.cluster,
        false => &live.layers.broker,
    };
    let ops: Vec<AlterableConfig> = ops
        .iter()
        .filter(|op| op.config_operation != OP_DELETE || current.contains_key(op.name.as_str()))
        .cloned()
        .collect();
    crate::broker::only_dynamic(ops.iter().map(|op| op.name.as_str()))?;
    let next = apply_ops(current, &ops, |key| {
        let k = config::keys::lookup(key)
            .ok_or_else(|| Error::InvalidConfig(format!("unknown broker config {key}")))?;
        Ok((
            k.kind,
            config::keys::describe(k, &live).value.unwrap_or_default(),
        ))
    })?;
    if next == *current {
        return Ok(());
    }
    broker.set_broker_configs(name, next, validate_only).await
}

/// Applies SET / DELETE / APPEND / SUBTRACT to a set of configs; `key` gives a key's type
/// and the value it has when the set leaves it out (what APPEND and SUBTRACT start from).
fn apply_ops(
    current: &BTreeMap<String, String>,
    ops: &[AlterableConfig],
    key: impl Fn(&str) -> Result<(Kind, String)>,
) -> Result<BTreeMap<String, String>> {
    let mut next = current.clone();
    for op in ops {
        let name = op.name.to_string();
        let (kind, default) = key(&name)?;
        let value = op.value.as_ref().map(|v| v.to_string());
        match op.config_operation {
            OP_SET => {
                let v = value
                    .ok_or_else(|| Error::InvalidConfig(format!("SET of {name} needs a value")))?;
                next.insert(name, v);
            }
            OP_DELETE => {
                next.remove(&name);
            }
            OP_APPEND | OP_SUBTRACT => {
                if kind != Kind::List {
                    return Err(Error::InvalidConfig(format!(
                        "{name} is not a list: APPEND and SUBTRACT do not apply"
                    )));
                }
                let base = next.get(&name).cloned().unwrap_or(default);
                let mut items: Vec<String> = base
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                let given: Vec<String> = value
                    .unwrap_or_default()
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                if op.config_operation == OP_APPEND {
                    for g in given {
                        if !items.contains(&g) {
                            items.push(g);
                        }
                    }
                } else {
                    items.retain(|i| !given.contains(i));
                }
                next.insert(name, items.join(","));
            }
            other => {
                return Err(Error::InvalidRequest(format!(
                    "unknown config operation {other}"
                )))
            }
        }
    }
    Ok(next)
}
