//! UpdateFeatures (KIP-584): `kafka-features upgrade/downgrade` sets cluster feature levels
//! (here `transaction.version`) through the controller; DescribeFeatures is ApiVersions.

use std::sync::Arc;

use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::ResponseError;

use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::controller::metadata::{FeatureUpdate, UpgradeType};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: UpdateFeaturesRequest,
) -> UpdateFeaturesResponse {
    let names: Vec<String> = req
        .feature_updates
        .iter()
        .map(|u| u.feature.to_string())
        .collect();
    // `error`: None when every update was made.
    let answer = |error: Option<ResponseError>, message: Option<String>| {
        // Kafka: v0-1 list each feature only when all succeeded; v2 has no list.
        let results = match (ctx.version < 2, error.is_none()) {
            (true, true) => names
                .iter()
                .map(|n| UpdatableFeatureResult::default().with_feature(str_bytes(n.clone())))
                .collect(),
            _ => Vec::new(),
        };
        UpdateFeaturesResponse::default()
            .with_error_code(error.map_or(0, |e| e.code()))
            .with_error_message(message.map(str_bytes))
            .with_results(results)
    };
    // Kafka's check: ALTER on the cluster.
    if !ctx.may_on_cluster(broker, crate::security::acl::op::ALTER) {
        return answer(Some(ResponseError::ClusterAuthorizationFailed), None);
    }
    let mut updates = Vec::with_capacity(req.feature_updates.len());
    for u in &req.feature_updates {
        let kind = match ctx.version {
            0 if u.allow_downgrade => Some(UpgradeType::SafeDowngrade),
            0 => Some(UpgradeType::Upgrade),
            _ => UpgradeType::from_wire(u.upgrade_type),
        };
        let Some(kind) = kind else {
            return answer(
                Some(ResponseError::InvalidUpdateVersion),
                Some(format!(
                    "The update failed for all features since the following feature had an \
                     error: Invalid update version {} for feature {}. The controller does not \
                     support the given upgrade type.",
                    u.max_version_level, u.feature
                )),
            );
        };
        if updates
            .iter()
            .any(|x: &FeatureUpdate| *x.name == *u.feature)
        {
            return answer(
                Some(ResponseError::InvalidRequest),
                Some(format!("Feature {} appears more than once.", u.feature)),
            );
        }
        updates.push(FeatureUpdate {
            name: u.feature.to_string(),
            level: u.max_version_level,
            kind,
        });
    }
    if updates.is_empty() {
        // Nothing to change (Kafka's controller answers the same).
        return answer(None, None);
    }
    match broker.update_features(updates, req.validate_only).await {
        Ok(()) => answer(None, None),
        Err(e) => answer(Some(e.response_error()), Some(e.to_string())),
    }
}
