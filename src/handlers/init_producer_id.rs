//! InitProducerId: without a transactional id, a fresh producer id at epoch 0 for an
//! idempotent producer, as Kafka does; with one, the transaction coordinator's answer for
//! that id (a new id, a bumped epoch, or a fenced predecessor and a retry).

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::RequestContext;
use crate::broker::Broker;
use crate::security::acl::{op, resource};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    // Kafka's checks: WRITE on the transactional id; for an idempotent producer,
    // IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    let access = ctx.access(broker);
    if let Some(id) = req.transactional_id.as_ref() {
        if id.is_empty() {
            return response.with_error_code(ResponseError::InvalidRequest.code());
        }
        if !access.allows(op::WRITE, resource::TRANSACTIONAL_ID, id) {
            return response
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
        }
        // KIP-360 (v3+): the producer id and epoch the client had, if any.
        let expected = (ctx.version >= 3 && req.producer_id.0 >= 0)
            .then_some((req.producer_id.0, req.producer_epoch));
        return match broker
            .txns
            .init_producer_id(id, req.transaction_timeout_ms, expected)
            .await
        {
            Ok((pid, epoch)) => response
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch),
            // PRODUCER_FENCED is new in v4; older clients know INVALID_PRODUCER_EPOCH.
            Err(ResponseError::ProducerFenced) if ctx.version < 4 => {
                response.with_error_code(ResponseError::InvalidProducerEpoch.code())
            }
            Err(e) => response.with_error_code(e.code()),
        };
    }
    if !access.allows_cluster(op::IDEMPOTENT_WRITE)
        && !access.allows_any(op::WRITE, resource::TOPIC)
    {
        return response.with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    match broker.next_producer_id().await {
        Ok(id) => response
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => {
            tracing::error!(error = %e, "cannot allocate a producer id");
            response.with_error_code(e.code())
        }
    }
}
