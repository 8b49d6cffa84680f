//! AlterClientQuotas and DescribeClientQuotas (KIP-546), what `kafka-configs
//! --entity-type users|clients|ips --alter --add-config producer_byte_rate=...` and
//! `--describe` send. The quotas live in the metadata log ([`crate::controller::quotas`]
//! decides and describes them as Kafka's controller does); this broker answers a describe
//! from its own image.

use std::sync::Arc;

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::describe_client_quotas_response as described;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::controller::quotas::{AlterResult, Alteration};
use crate::security::acl::op;

pub async fn alter(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let alterations: Vec<Alteration> = req
        .entries
        .iter()
        .map(|e| Alteration {
            entity: e
                .entity
                .iter()
                .map(|d| {
                    (
                        d.entity_type.to_string(),
                        d.entity_name.as_ref().map(|n| n.to_string()),
                    )
                })
                .collect(),
            ops: e
                .ops
                .iter()
                .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
                .collect(),
        })
        .collect();
    let refused = |a: &Alteration, e: ResponseError, message: String| AlterResult {
        entity: a.entity.clone(),
        error: e.code(),
        message: Some(message),
    };
    // Kafka's check: ALTER_CONFIGS on the cluster, else every entry is refused.
    let results: Vec<AlterResult> = if !ctx.may_on_cluster(broker, op::ALTER_CONFIGS) {
        let e = ResponseError::ClusterAuthorizationFailed;
        alterations
            .iter()
            .map(|a| refused(a, e, e.to_string()))
            .collect()
    } else {
        // A NaN or an infinity is refused here: the controller's RPCs and log are JSON,
        // which has no such numbers.
        let not_finite: Vec<Option<String>> = alterations
            .iter()
            .map(|a| {
                a.ops
                    .iter()
                    .find(|(_, v)| v.is_some_and(|v| !v.is_finite()))
                    .map(|(k, _)| format!("Configuration {k} must be a finite number"))
            })
            .collect();
        let asked: Vec<Alteration> = alterations
            .iter()
            .zip(&not_finite)
            .filter(|(_, refused)| refused.is_none())
            .map(|(a, _)| a.clone())
            .collect();
        // Nothing decided (no controller): every entry asked gets the error.
        let mut decided = match asked.is_empty() {
            true => Ok(Vec::new().into_iter()),
            false => broker
                .alter_client_quotas(asked, req.validate_only)
                .await
                .map(|results| results.into_iter())
                .map_err(|e| (e.code(), e.to_string())),
        };
        alterations
            .iter()
            .zip(not_finite)
            .map(|(a, not_finite)| match (not_finite, &mut decided) {
                (Some(message), _) => refused(a, ResponseError::InvalidRequest, message),
                (None, Ok(results)) => results.next().expect("one answer per entry asked"),
                (None, Err((code, message))) => AlterResult {
                    entity: a.entity.clone(),
                    error: *code,
                    message: Some(message.clone()),
                },
            })
            .collect()
    };
    let entries = results
        .into_iter()
        .map(|r| {
            EntryData::default()
                .with_error_code(r.error)
                .with_error_message(r.message.map(str_bytes))
                .with_entity(
                    r.entity
                        .into_iter()
                        .map(|(t, n)| {
                            EntityData::default()
                                .with_entity_type(str_bytes(t))
                                .with_entity_name(n.map(str_bytes))
                        })
                        .collect(),
                )
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

pub async fn describe(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    // Kafka's check: DESCRIBE_CONFIGS on the cluster.
    if !ctx.may_on_cluster(broker, op::DESCRIBE_CONFIGS) {
        let e = ResponseError::ClusterAuthorizationFailed;
        return DescribeClientQuotasResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(e.to_string())))
            .with_entries(None);
    }
    let components: Vec<_> = req
        .components
        .iter()
        .map(|c| {
            (
                c.entity_type.to_string(),
                c.match_type,
                c._match.as_ref().map(|m| m.to_string()),
            )
        })
        .collect();
    match broker.describe_client_quotas(&components, req.strict) {
        Ok(found) => {
            let entries = found
                .into_iter()
                .map(|q| {
                    described::EntryData::default()
                        .with_entity(
                            q.entity
                                .into_iter()
                                .map(|(t, n)| {
                                    described::EntityData::default()
                                        .with_entity_type(str_bytes(t))
                                        .with_entity_name(n.map(str_bytes))
                                })
                                .collect(),
                        )
                        .with_values(
                            q.values
                                .into_iter()
                                .map(|(k, v)| {
                                    described::ValueData::default()
                                        .with_key(str_bytes(k))
                                        .with_value(v.0)
                                })
                                .collect(),
                        )
                })
                .collect();
            DescribeClientQuotasResponse::default().with_entries(Some(entries))
        }
        Err((e, message)) => DescribeClientQuotasResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(message)))
            .with_entries(None),
    }
}
