//! ApiVersions: the versions of every API in the dispatch table, which dispatch hands in, so
//! an API is advertised exactly when it is served.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

/// The table's rows as ApiVersions lists them.
pub fn advertised(apis: &[(ApiKey, i16, i16)]) -> Vec<ApiVersion> {
    apis.iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect()
}

pub fn handle(apis: &[(ApiKey, i16, i16)]) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(advertised(apis))
}
