//! DescribeCluster: the cluster id, the controller and the brokers (this node).

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};

use super::{broker_id, str_bytes, CLUSTER_OPERATIONS_ALL, OPERATIONS_UNKNOWN};
use crate::broker::Broker;
use crate::dispatch::RequestContext;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let adv = broker.advertised(&ctx.conn.listener);
    DescribeClusterResponse::default()
        .with_endpoint_type(req.endpoint_type)
        .with_cluster_id(str_bytes(broker.cluster_id.clone()))
        .with_controller_id(broker_id(broker.node_id()))
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(broker_id(broker.node_id()))
            .with_host(str_bytes(adv.host.clone()))
            .with_port(adv.port as i32)])
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            CLUSTER_OPERATIONS_ALL
        } else {
            OPERATIONS_UNKNOWN
        })
}
