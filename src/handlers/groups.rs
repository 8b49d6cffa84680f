//! The classic group protocol and group administration: FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, ListGroups, DescribeGroups, DeleteGroups. The logic
//! lives in [`crate::coordinator`]; these functions translate versions and fields.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as CoordinatorEntry;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::RequestContext;
use super::{broker_id, group_described, str_bytes};
use crate::broker::authorizer::denied;
use crate::broker::Broker;
use crate::coordinator::group::{GroupState, Join};
use crate::replication::CoordinatorKind;
use crate::security::acl::{op, resource};

/// Kafka's check of the classic group protocol: READ on the group.
fn may_read(broker: &Broker, ctx: &RequestContext<'_>, group: &str) -> bool {
    ctx.access(broker).allows(op::READ, resource::GROUP, group)
}

fn code(e: Option<ResponseError>) -> i16 {
    e.map_or(0, |e| e.code())
}

fn opt_string(s: &Option<kafka_protocol::protocol::StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.to_string())
}

pub async fn find_coordinator(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    // Kafka's checks: DESCRIBE on the group or the transactional id; a share partition's
    // coordinator is for brokers, CLUSTER_ACTION.
    let access = ctx.access(broker);
    let access = &access;
    let find = |key: String| async move {
        let allowed = match req.key_type {
            0 => access.allows(op::DESCRIBE, resource::GROUP, &key),
            1 => access.allows(op::DESCRIBE, resource::TRANSACTIONAL_ID, &key),
            2 => access.allows_cluster(op::CLUSTER_ACTION),
            _ => true,
        };
        if !allowed {
            let rt = [
                resource::GROUP,
                resource::TRANSACTIONAL_ID,
                resource::CLUSTER,
            ];
            return Err((denied(rt[req.key_type as usize]).response_error(), None));
        }
        let kind = match req.key_type {
            0 => CoordinatorKind::Group,
            1 => CoordinatorKind::Transaction,
            // The share coordinator of a share partition, `group:topic-id:partition`.
            2 => CoordinatorKind::Share,
            _ => {
                return Err((
                    ResponseError::InvalidRequest,
                    Some("unsupported coordinator key type"),
                ))
            }
        };
        broker
            .coordinator(kind, &key, &ctx.conn.listener)
            .await
            .map_err(|e| (e, None))
    };
    if ctx.version >= 4 {
        let mut coordinators = Vec::with_capacity(req.coordinator_keys.len());
        for key in &req.coordinator_keys {
            let c = CoordinatorEntry::default().with_key(key.clone());
            coordinators.push(match find(key.to_string()).await {
                Ok((id, host, port)) => c
                    .with_node_id(broker_id(id))
                    .with_host(str_bytes(host))
                    .with_port(port as i32),
                Err((e, msg)) => c
                    .with_node_id(broker_id(-1))
                    .with_port(-1)
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(
                        msg.map_or_else(|| e.to_string(), str::to_string),
                    ))),
            });
        }
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    match find(req.key.to_string()).await {
        Ok((id, host, port)) => FindCoordinatorResponse::default()
            .with_node_id(broker_id(id))
            .with_host(str_bytes(host))
            .with_port(port as i32),
        Err((e, msg)) => {
            let r = FindCoordinatorResponse::default()
                .with_error_code(e.code())
                .with_node_id(broker_id(-1))
                .with_port(-1);
            if ctx.version >= 1 {
                r.with_error_message(msg.map(str_bytes))
            } else {
                r
            }
        }
    }
}

pub async fn join_group(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: JoinGroupRequest,
) -> JoinGroupResponse {
    let v = ctx.version;
    let group = req.group_id.to_string();
    let result = if group.is_empty() {
        crate::coordinator::group::JoinResult::error(ResponseError::InvalidGroupId, &req.member_id)
    } else if !may_read(broker, ctx, &group) {
        crate::coordinator::group::JoinResult::error(
            ResponseError::GroupAuthorizationFailed,
            &req.member_id,
        )
    } else {
        let ms = |v: i32| Duration::from_millis(v.max(0) as u64);
        let rebalance = if v >= 1 && req.rebalance_timeout_ms > 0 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        };
        let join = Join {
            member_id: req.member_id.to_string(),
            instance_id: opt_string(&req.group_instance_id),
            client_id: ctx.client_id.clone().unwrap_or_default(),
            client_host: format!("/{}", ctx.conn.peer.ip()),
            session_timeout: ms(req.session_timeout_ms),
            rebalance_timeout: ms(rebalance),
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.clone()))
                .collect(),
            require_known_member_id: v >= 4,
        };
        broker.groups.join(&group, join).await
    };
    let mut resp = JoinGroupResponse::default()
        .with_error_code(code(result.error))
        .with_generation_id(result.generation)
        .with_leader(str_bytes(result.leader))
        .with_member_id(str_bytes(result.member_id))
        .with_members(
            result
                .members
                .into_iter()
                .map(|(id, instance, metadata)| {
                    let m = JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(id))
                        .with_metadata(metadata);
                    if v >= 5 {
                        m.with_group_instance_id(instance.map(str_bytes))
                    } else {
                        m
                    }
                })
                .collect(),
        );
    if v >= 7 {
        resp = resp
            .with_protocol_type(result.protocol_type.map(str_bytes))
            .with_protocol_name(result.protocol_name.map(str_bytes));
    } else {
        // Not nullable before v7.
        resp = resp.with_protocol_name(Some(str_bytes(result.protocol_name.unwrap_or_default())));
    }
    resp
}

pub async fn sync_group(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: SyncGroupRequest,
) -> SyncGroupResponse {
    let group = req.group_id.to_string();
    let result = if group.is_empty() {
        crate::coordinator::group::SyncResult::error(ResponseError::InvalidGroupId)
    } else if !may_read(broker, ctx, &group) {
        crate::coordinator::group::SyncResult::error(ResponseError::GroupAuthorizationFailed)
    } else {
        let assignments = req
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.clone()))
            .collect();
        broker
            .groups
            .sync(
                &group,
                &req.member_id,
                req.group_instance_id.as_deref(),
                req.generation_id,
                req.protocol_type.as_deref(),
                req.protocol_name.as_deref(),
                assignments,
            )
            .await
    };
    let resp = SyncGroupResponse::default()
        .with_error_code(code(result.error))
        .with_assignment(result.assignment);
    if ctx.version >= 5 {
        resp.with_protocol_type(result.protocol_type.map(str_bytes))
            .with_protocol_name(result.protocol_name.map(str_bytes))
    } else {
        resp
    }
}

pub async fn heartbeat(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: HeartbeatRequest,
) -> HeartbeatResponse {
    let result = if req.group_id.is_empty() {
        Err(ResponseError::InvalidGroupId)
    } else if !may_read(broker, ctx, &req.group_id) {
        Err(ResponseError::GroupAuthorizationFailed)
    } else {
        broker.groups.heartbeat(
            &req.group_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id,
        )
    };
    HeartbeatResponse::default().with_error_code(code(result.err()))
}

pub async fn leave_group(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: LeaveGroupRequest,
) -> LeaveGroupResponse {
    if req.group_id.is_empty() {
        return LeaveGroupResponse::default().with_error_code(ResponseError::InvalidGroupId.code());
    }
    if !may_read(broker, ctx, &req.group_id) {
        return LeaveGroupResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    if ctx.version < 3 {
        let error = match broker
            .groups
            .leave(&req.group_id, &[(req.member_id.to_string(), None)])
        {
            Ok(results) => results.into_iter().next().and_then(|r| r.err()),
            Err(e) => Some(e),
        };
        return LeaveGroupResponse::default().with_error_code(code(error));
    }
    let who: Vec<(String, Option<String>)> = req
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), opt_string(&m.group_instance_id)))
        .collect();
    let results = match broker.groups.leave(&req.group_id, &who) {
        Ok(results) => results,
        Err(e) => return LeaveGroupResponse::default().with_error_code(e.code()),
    };
    LeaveGroupResponse::default().with_members(
        who.into_iter()
            .zip(results)
            .map(|((id, instance), r)| {
                MemberResponse::default()
                    .with_member_id(str_bytes(id))
                    .with_group_instance_id(instance.map(str_bytes))
                    .with_error_code(code(r.err()))
            })
            .collect(),
    )
}

pub async fn list_groups(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: ListGroupsRequest,
) -> ListGroupsResponse {
    let v = ctx.version;
    let states: Vec<String> = req
        .states_filter
        .iter()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let types: Vec<String> = req
        .types_filter
        .iter()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    // DESCRIBE on the cluster lists every group, else those the principal may describe.
    let access = ctx.access(broker);
    let all = access.allows_cluster(op::DESCRIBE);
    let groups = broker
        .groups
        .list()
        .into_iter()
        .filter(|g| all || access.allows(op::DESCRIBE, resource::GROUP, &g.id))
        .filter(|g| states.is_empty() || states.contains(&g.state.to_ascii_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == g.group_type))
        .map(|g| {
            let mut l = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(g.id)))
                .with_protocol_type(str_bytes(g.protocol_type));
            if v >= 4 {
                l = l.with_group_state(str_bytes(g.state));
            }
            if v >= 5 {
                l = l.with_group_type(str_bytes(g.group_type));
            }
            l
        })
        .collect();
    let loading = broker.groups.loading();
    ListGroupsResponse::default()
        .with_error_code(if loading {
            ResponseError::CoordinatorLoadInProgress.code()
        } else {
            0
        })
        .with_groups(if loading { Vec::new() } else { groups })
}

pub async fn describe_groups(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let v = ctx.version;
    let access = ctx.access(broker);
    let groups = req
        .groups
        .iter()
        .map(|id| {
            let base = DescribedGroup::default().with_group_id(id.clone());
            let base = match group_described(&access, id, req.include_authorized_operations) {
                // v0-2 have no authorized operations.
                Ok(ops) if v >= 3 => base.with_authorized_operations(ops),
                Ok(_) => base,
                Err(e) => return base.with_error_code(e.code()),
            };
            let d = match broker.groups.describe(id) {
                Ok(d) => d,
                Err(e) => return base.with_error_code(e.code()),
            };
            let Some(d) = d else {
                // Kafka 4 (KIP-1043): v6 says GROUP_ID_NOT_FOUND, older versions "Dead".
                let dead = base.with_group_state(str_bytes(GroupState::Dead.name()));
                return if v >= 6 {
                    dead.with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(str_bytes(format!(
                            "Group {} not found.",
                            id.as_str()
                        ))))
                } else {
                    dead
                };
            };
            let stable = d.state == GroupState::Stable;
            let protocol = d.protocol_name.clone();
            let members = d
                .members
                .iter()
                .map(|m| {
                    let mut dm = DescribedGroupMember::default()
                        .with_member_id(str_bytes(m.id.clone()))
                        .with_client_id(str_bytes(m.client_id.clone()))
                        .with_client_host(str_bytes(m.client_host.clone()));
                    if v >= 4 {
                        dm = dm.with_group_instance_id(m.instance_id.clone().map(str_bytes));
                    }
                    if stable {
                        dm = dm
                            .with_member_metadata(m.metadata(Some(&protocol)))
                            .with_member_assignment(m.assignment.clone());
                    }
                    dm
                })
                .collect();
            base.with_group_state(str_bytes(d.state.name()))
                .with_protocol_type(str_bytes(d.protocol_type))
                .with_protocol_data(str_bytes(d.protocol_name))
                .with_members(members)
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

pub async fn delete_groups(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let access = ctx.access(broker);
    let mut results = Vec::with_capacity(req.groups_names.len());
    for id in &req.groups_names {
        let error = if id.is_empty() {
            Err(ResponseError::InvalidGroupId)
        } else if !access.allows(op::DELETE, resource::GROUP, id) {
            Err(ResponseError::GroupAuthorizationFailed)
        } else {
            let share = broker.groups.is_share_group(id);
            let deleted = broker.groups.delete_group(id).await;
            if deleted.is_ok() && share {
                // A share group's state goes with it: of every partition it may have read.
                let tps = broker
                    .catalog
                    .all()
                    .iter()
                    .filter(|t| !t.is_internal())
                    .flat_map(|t| (0..t.partitions.len() as i32).map(move |p| (t.id, p)))
                    .collect();
                if let Err(e) = broker.shares.forget_group(id, tps).await {
                    tracing::warn!(group = %id.as_str(), error = ?e, "share group state not removed");
                }
            }
            deleted
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(id.clone())
                .with_error_code(code(error.err())),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
