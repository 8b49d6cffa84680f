//! DescribeCluster: the cluster id, the controller and the live brokers.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};

use super::RequestContext;
use super::{broker_id, str_bytes, CLUSTER_OPERATIONS_ALL, OPERATIONS_UNKNOWN};
use crate::broker::Broker;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let brokers = broker.live_brokers(&ctx.conn.listener);
    let controller = broker.controller_for_clients(&brokers);
    DescribeClusterResponse::default()
        .with_endpoint_type(req.endpoint_type)
        .with_cluster_id(str_bytes(broker.cluster_id()))
        .with_controller_id(broker_id(controller))
        .with_brokers(
            brokers
                .into_iter()
                .map(|(id, host, port)| {
                    DescribeClusterBroker::default()
                        .with_broker_id(broker_id(id))
                        .with_host(str_bytes(host))
                        .with_port(port as i32)
                })
                .collect(),
        )
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            ctx.access(broker).operations(
                crate::security::acl::resource::CLUSTER,
                crate::security::acl::CLUSTER_NAME,
                CLUSTER_OPERATIONS_ALL,
            )
        } else {
            OPERATIONS_UNKNOWN
        })
}
