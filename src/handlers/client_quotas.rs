//! DescribeClientQuotas, which `kafka-configs --describe --entity-type users` sends beside
//! DescribeUserScramCredentials. Client quotas cannot be set on Cairn yet
//! (AlterClientQuotas is not offered), so a well-formed filter matches no entry; a
//! malformed one gets INVALID_REQUEST, as Kafka checks it.

use std::sync::Arc;

use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};
use kafka_protocol::ResponseError;

use super::{str_bytes, RequestContext};
use crate::broker::Broker;

/// The quota entity types Kafka knows.
const ENTITY_TYPES: [&str; 3] = ["user", "client-id", "ip"];

pub async fn describe(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    // Kafka's check: DESCRIBE_CONFIGS on the cluster.
    if !ctx.may_on_cluster(broker, crate::security::acl::op::DESCRIBE_CONFIGS) {
        return DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_entries(None);
    }
    match check_filter(&req) {
        Ok(()) => DescribeClientQuotasResponse::default().with_entries(Some(Vec::new())),
        Err(message) => DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(message)))
            .with_entries(None),
    }
}

/// Kafka's checks of a filter: known entity types, each at most once, and a match that
/// fits its type (0 exact with a name, 1 the default without one, 2 any).
fn check_filter(req: &DescribeClientQuotasRequest) -> Result<(), String> {
    let mut seen = Vec::new();
    for c in &req.components {
        let t = c.entity_type.as_str();
        if !ENTITY_TYPES.contains(&t) {
            return Err(format!("Unexpected entity type {t}"));
        }
        if seen.contains(&t) {
            return Err(format!("Duplicate entity type {t}"));
        }
        seen.push(t);
        match (c.match_type, &c._match) {
            (0, Some(_)) | (1, None) | (2, None) => {}
            (0..=2, _) => return Err(format!("Bad match for entity type {t}")),
            (other, _) => return Err(format!("Unexpected match type {other}")),
        }
    }
    Ok(())
}
