//! ListConfigResources (KIP-1142): the resources that have configs. v0 lists only client
//! metrics resources (none here); v1 lists topics, brokers and the groups that have configs,
//! every type when none is named.

use std::sync::Arc;

use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{ListConfigResourcesRequest, ListConfigResourcesResponse};

use super::str_bytes;
use super::RequestContext;
use crate::broker::Broker;
use crate::error::Error;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const CLIENT_METRICS: i8 = 16;
const GROUP: i8 = 32;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ListConfigResourcesRequest,
) -> ListConfigResourcesResponse {
    let types: Vec<i8> = if ctx.version == 0 {
        vec![CLIENT_METRICS]
    } else if req.resource_types.is_empty() {
        vec![TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP]
    } else {
        req.resource_types.clone()
    };
    let mut resources = Vec::new();
    for t in types {
        match t {
            TOPIC => resources.extend(broker.catalog.all().iter().map(|topic| {
                ConfigResource::default()
                    .with_resource_name(str_bytes(topic.name.clone()))
                    .with_resource_type(TOPIC)
            })),
            BROKER => resources.push(
                ConfigResource::default()
                    .with_resource_name(str_bytes(broker.node_id().to_string()))
                    .with_resource_type(BROKER),
            ),
            GROUP => {
                if let Some(c) = broker.cluster() {
                    resources.extend(c.image().group_configs.keys().map(|g| {
                        ConfigResource::default()
                            .with_resource_name(str_bytes(g.clone()))
                            .with_resource_type(GROUP)
                    }))
                }
            }
            // No broker loggers or client metrics subscriptions have configs.
            BROKER_LOGGER | CLIENT_METRICS => {}
            _ => {
                return ListConfigResourcesResponse::default()
                    .with_error_code(Error::InvalidRequest(String::new()).code());
            }
        }
    }
    if ctx.version == 0 {
        resources.clear();
    }
    ListConfigResourcesResponse::default().with_config_resources(resources)
}
