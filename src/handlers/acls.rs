//! CreateAcls, DescribeAcls and DeleteAcls: what `kafka-acls` sends. The ACLs live in the
//! metadata log (`Image::create_acls`, `Image::delete_acls`); with no authorizer
//! configured each answers SECURITY_DISABLED, as Kafka does. Creating and deleting need
//! ALTER on the cluster, describing needs DESCRIBE.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::error::Error;
use crate::security::acl::{op, Binding, Filter};

/// Why nothing was done: no authorizer, or the principal may not.
fn refusal(broker: &Broker, ctx: &RequestContext<'_>, operation: i8) -> Option<Error> {
    let access = ctx.access(broker);
    if !access.enabled() {
        return Some(Error::Authorization(ResponseError::SecurityDisabled));
    }
    (!access.allows_cluster(operation)).then_some(Error::Authorization(
        ResponseError::ClusterAuthorizationFailed,
    ))
}

fn message(e: &Error) -> Option<kafka_protocol::protocol::StrBytes> {
    Some(str_bytes(match e.response_error() {
        ResponseError::SecurityDisabled => "No Authorizer is configured.".to_string(),
        _ => e.to_string(),
    }))
}

pub async fn create(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: CreateAclsRequest,
) -> CreateAclsResponse {
    let failed = |e: &Error| {
        AclCreationResult::default()
            .with_error_code(e.code())
            .with_error_message(message(e))
    };
    if let Some(e) = refusal(broker, ctx, op::ALTER) {
        let results = req.creations.iter().map(|_| failed(&e)).collect();
        return CreateAclsResponse::default().with_results(results);
    }
    let bindings = req
        .creations
        .iter()
        .map(|c| Binding {
            resource_type: c.resource_type,
            name: c.resource_name.to_string(),
            pattern: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission: c.permission_type,
        })
        .collect();
    let results = match broker.create_acls(bindings).await {
        Ok(results) => results
            .into_iter()
            .map(|r| match r {
                None => AclCreationResult::default(),
                Some(why) => AclCreationResult::default()
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(why))),
            })
            .collect(),
        Err(e) => req.creations.iter().map(|_| failed(&e)).collect(),
    };
    CreateAclsResponse::default().with_results(results)
}

pub async fn describe(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeAclsRequest,
) -> DescribeAclsResponse {
    if let Some(e) = refusal(broker, ctx, op::DESCRIBE) {
        return DescribeAclsResponse::default()
            .with_error_code(e.code())
            .with_error_message(message(&e));
    }
    let filter = Filter {
        resource_type: req.resource_type_filter,
        name: req.resource_name_filter.map(|n| n.to_string()),
        pattern: req.pattern_type_filter,
        principal: req.principal_filter.map(|p| p.to_string()),
        host: req.host_filter.map(|h| h.to_string()),
        operation: req.operation,
        permission: req.permission_type,
    };
    if let Some(why) = filter.invalid() {
        return DescribeAclsResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(why)));
    }
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for b in broker.acls(&filter) {
        by_resource
            .entry((b.resource_type, b.name, b.pattern))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(str_bytes(b.principal))
                    .with_host(str_bytes(b.host))
                    .with_operation(b.operation)
                    .with_permission_type(b.permission),
            );
    }
    let resources = by_resource
        .into_iter()
        .map(|((rt, name, pt), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(rt)
                .with_resource_name(str_bytes(name))
                .with_pattern_type(pt)
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default().with_resources(resources)
}

pub async fn delete(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let failed = |e: &Error| {
        DeleteAclsFilterResult::default()
            .with_error_code(e.code())
            .with_error_message(message(e))
    };
    if let Some(e) = refusal(broker, ctx, op::ALTER) {
        let results = req.filters.iter().map(|_| failed(&e)).collect();
        return DeleteAclsResponse::default().with_filter_results(results);
    }
    let filters = req
        .filters
        .iter()
        .map(|f| Filter {
            resource_type: f.resource_type_filter,
            name: f.resource_name_filter.as_ref().map(|n| n.to_string()),
            pattern: f.pattern_type_filter,
            principal: f.principal_filter.as_ref().map(|p| p.to_string()),
            host: f.host_filter.as_ref().map(|h| h.to_string()),
            operation: f.operation,
            permission: f.permission_type,
        })
        .collect();
    let results = match broker.delete_acls(filters).await {
        Ok(results) => results
            .into_iter()
            .map(|r| match r {
                Ok(removed) => DeleteAclsFilterResult::default().with_matching_acls(
                    removed
                        .into_iter()
                        .map(|b| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(b.resource_type)
                                .with_resource_name(str_bytes(b.name))
                                .with_pattern_type(b.pattern)
                                .with_principal(str_bytes(b.principal))
                                .with_host(str_bytes(b.host))
                                .with_operation(b.operation)
                                .with_permission_type(b.permission)
                        })
                        .collect(),
                ),
                Err(why) => DeleteAclsFilterResult::default()
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(why))),
            })
            .collect(),
        Err(e) => req.filters.iter().map(|_| failed(&e)).collect(),
    };
    DeleteAclsResponse::default().with_filter_results(results)
}
