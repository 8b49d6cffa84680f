//! ApiVersions: the versions of every API in the dispatch table.

use std::sync::Arc;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use crate::broker::Broker;
use crate::dispatch::{RequestContext, APIS};

pub fn advertised() -> Vec<ApiVersion> {
    APIS.iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect()
}

pub async fn handle(
    _broker: &Arc<Broker>,
    _ctx: &RequestContext<'_>,
    _req: ApiVersionsRequest,
) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(advertised())
}
