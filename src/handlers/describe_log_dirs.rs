//! DescribeLogDirs: each of `log.dirs`, with the partitions it holds and their sizes.

use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};

use super::RequestContext;
use super::{str_bytes, topic_name};
use crate::broker::Broker;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    // Kafka's check: DESCRIBE on the cluster.
    if !ctx.may_on_cluster(broker, crate::security::acl::op::DESCRIBE) {
        return DescribeLogDirsResponse::default()
            .with_error_code(kafka_protocol::ResponseError::ClusterAuthorizationFailed.code());
    }
    let wanted: Vec<(String, Option<Vec<i32>>)> = match &req.topics {
        None => broker
            .catalog
            .all()
            .iter()
            .map(|t| (t.name.clone(), None))
            .collect(),
        Some(ts) => ts
            .iter()
            .map(|t| (t.topic.to_string(), Some(t.partitions.clone())))
            .collect(),
    };
    let dirs = broker.catalog.dirs();
    let node = broker.node_id();
    let mut results = Vec::with_capacity(dirs.len());
    for (index, d) in dirs.iter().enumerate() {
        let mut topics = Vec::new();
        for (name, only) in &wanted {
            let Some(t) = broker.catalog.get(name) else {
                continue;
            };
            let partitions: Vec<DescribeLogDirsPartition> = t
                .partitions
                .iter()
                .filter(|p| p.dir == index)
                // In a cluster every broker knows every partition; it holds only its replicas.
                .filter(|p| p.placement().replicas.contains(&node))
                .filter(|p| only.as_ref().is_none_or(|o| o.contains(&p.index)))
                .map(|p| {
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p.index)
                        .with_partition_size(p.log.size_bytes() as i64)
                        .with_offset_lag(0)
                })
                .collect();
            if !partitions.is_empty() {
                topics.push(
                    DescribeLogDirsTopic::default()
                        .with_name(topic_name(name))
                        .with_partitions(partitions),
                );
            }
        }
        let dir = std::fs::canonicalize(&d.path).unwrap_or_else(|_| d.path.clone());
        // The file system holding the directory, as Kafka reports it (KIP-827); -1 if unknown.
        let (total, usable) = match rustix::fs::statvfs(&dir) {
            Ok(s) => (
                i64::try_from(s.f_blocks.saturating_mul(s.f_frsize)).unwrap_or(i64::MAX),
                i64::try_from(s.f_bavail.saturating_mul(s.f_frsize)).unwrap_or(i64::MAX),
            ),
            Err(_) => (-1, -1),
        };
        results.push(
            DescribeLogDirsResult::default()
                .with_log_dir(str_bytes(dir.display().to_string()))
                .with_topics(topics)
                .with_total_bytes(total)
                .with_usable_bytes(usable),
        );
    }
    DescribeLogDirsResponse::default().with_results(results)
}
