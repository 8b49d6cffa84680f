//! InitProducerId: a fresh, durably reserved producer id for idempotent producers. Each call
//! without a transactional id gets a new id at epoch 0, as Kafka does.

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::RequestContext;
use crate::broker::Broker;
use crate::error::Error;

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext<'_>,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if req.transactional_id.as_ref().is_some_and(|t| !t.is_empty()) {
        return response.with_error_code(Error::TransactionsUnsupported.code());
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
