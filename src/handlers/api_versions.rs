//! ApiVersions: the versions of every API in the dispatch table, which dispatch hands in, so
//! an API is advertised exactly when it is served.

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::controller::metadata::{Image, SUPPORTED_FEATURES};

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

/// v3+ also lists the cluster features this broker supports and the levels the cluster
/// has finalized (`image`: the metadata, once this broker has any). Clients switch on
/// them: a Java client uses transaction version 2 only once `transaction.version` 2 is
/// finalized with an epoch of 0 or more.
pub fn handle(apis: &[(ApiKey, i16, i16)], image: Option<&Image>) -> ApiVersionsResponse {
    let supported = SUPPORTED_FEATURES
        .iter()
        .map(|(name, min, max)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    let mut r = ApiVersionsResponse::default()
        .with_api_keys(advertised(apis))
        .with_supported_features(supported);
    if let Some(image) = image {
        let finalized = image
            .features
            .iter()
            .map(|(name, level)| {
                FinalizedFeatureKey::default()
                    .with_name(StrBytes::from_string(name.clone()))
                    .with_min_version_level(*level)
                    .with_max_version_level(*level)
            })
            .collect();
        r = r
            .with_finalized_features_epoch(image.features_epoch)
            .with_finalized_features(finalized);
    }
    r
}
