//! The authorizer's view for one request: who asks, from where, and the ACLs in force.
//! Handlers ask [`Access::allows`] what Kafka's StandardAuthorizer would answer; with no
//! authorizer configured everything is allowed.

use std::sync::Arc;

use super::Broker;
use crate::controller::metadata::Image;
use crate::error::{Error, Result};
use crate::security::acl::{self, Binding, Filter, Settings};

/// One request's authorization: the principal, its host, and the ACLs as this broker has
/// applied them when the request arrived.
pub struct Access {
    /// `None`: no authorizer, every operation is allowed.
    decider: Option<(Arc<Settings>, Arc<Image>)>,
    principal: String,
    host: String,
}

impl Access {
    /// Whether the principal may perform `operation` on the resource `(resource_type,
    /// name)`.
    pub fn allows(&self, operation: i8, resource_type: i8, name: &str) -> bool {
        match &self.decider {
            None => true,
            Some((settings, image)) => acl::authorize(
                settings,
                image.acls.values(),
                &self.principal,
                &self.host,
                operation,
                resource_type,
                name,
            ),
        }
    }

    /// Whether the principal may perform `operation` on the cluster.
    pub fn allows_cluster(&self, operation: i8) -> bool {
        self.allows(operation, acl::resource::CLUSTER, acl::CLUSTER_NAME)
    }

    /// Whether some binding allows the principal `operation` on some resource of
    /// `resource_type` (Kafka's `authorizeByResourceType`, for an idempotent producer
    /// with WRITE on any topic): super users and, with no binding of that type,
    /// `allow.everyone.if.no.acl.found` too.
    pub fn allows_any(&self, operation: i8, resource_type: i8) -> bool {
        let Some((settings, image)) = &self.decider else {
            return true;
        };
        if settings.super_users.contains(&self.principal) {
            return true;
        }
        let of_type: Vec<&Binding> = image
            .acls
            .values()
            .filter(|b| b.resource_type == resource_type)
            .collect();
        if of_type.is_empty() {
            return settings.allow_if_no_acl;
        }
        // Some resource an ALLOW binding names (a prefixed one: a name only it covers) that
        // the bindings allow this principal.
        of_type.iter().any(|b| {
            let name = match b.pattern {
                acl::pattern::LITERAL => b.name.clone(),
                _ => format!("{}\u{0}", b.name),
            };
            b.permission == acl::permission::ALLOW
                && acl::authorize(
                    settings,
                    of_type.iter().copied(),
                    &self.principal,
                    &self.host,
                    operation,
                    resource_type,
                    &name,
                )
        })
    }

    /// The operations of `mask` (bit i: operation code i) the principal may perform on the
    /// resource, as Metadata and DescribeGroups report authorized operations.
    pub fn operations(&self, resource_type: i8, name: &str, mask: i32) -> i32 {
        if self.decider.is_none() {
            return mask;
        }
        (0..31)
            .filter(|bit| mask & (1 << bit) != 0)
            .filter(|&bit| self.allows(bit as i8, resource_type, name))
            .fold(0, |acc, bit| acc | (1 << bit))
    }

    /// Whether an authorizer decides at all.
    pub fn enabled(&self) -> bool {
        self.decider.is_some()
    }
}

impl Broker {
    /// The authorization of a request by the principal and host `who` gives (asked only
    /// when an authorizer is configured).
    pub fn access(&self, who: impl FnOnce() -> (String, String)) -> Access {
        let Some(settings) = self.config.authorizer.clone() else {
            return Access {
                decider: None,
                principal: String::new(),
                host: String::new(),
            };
        };
        let (principal, host) = who();
        let image = self.cluster().map(|c| c.image()).unwrap_or_default();
        Access {
            decider: Some((settings, image)),
            principal,
            host,
        }
    }

    /// The ACLs matching `filter`, as this broker has applied them.
    pub fn acls(&self, filter: &Filter) -> Vec<Binding> {
        self.cluster()
            .map(|c| {
                c.image()
                    .acls
                    .values()
                    .filter(|b| filter.matches(b))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// CreateAcls: each binding's refusal, if any.
    pub async fn create_acls(&self, bindings: Vec<Binding>) -> Result<Vec<Option<String>>> {
        self.quorum()?.create_acls(bindings).await
    }

    /// DeleteAcls: per filter, the bindings removed or why the filter was refused.
    pub async fn delete_acls(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<std::result::Result<Vec<Binding>, String>>> {
        self.quorum()?.delete_acls(filters).await
    }
}

/// The error a denied request's resource gets, by resource type.
pub fn denied(resource_type: i8) -> Error {
    use kafka_protocol::ResponseError as E;
    Error::Authorization(match resource_type {
        acl::resource::TOPIC => E::TopicAuthorizationFailed,
        acl::resource::GROUP => E::GroupAuthorizationFailed,
        acl::resource::TRANSACTIONAL_ID => E::TransactionalIdAuthorizationFailed,
        _ => E::ClusterAuthorizationFailed,
    })
}
