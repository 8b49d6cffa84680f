//! Kafka's ACLs as its StandardAuthorizer decides them: bindings (a resource pattern and an
//! access control entry), the filters of DescribeAcls and DeleteAcls, and the decision for
//! one principal, host, operation and resource over a set of bindings. Pure: the bindings
//! live in the metadata image, the caller passes them in.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The CLUSTER resource's only name.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// A LITERAL pattern with this name matches every resource of its type.
pub const WILDCARD: &str = "*";
/// The principal `User:*` matches every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Kafka's ResourceType codes.
pub mod resource {
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

/// Kafka's PatternType codes.
pub mod pattern {
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;
}

/// Kafka's AclOperation codes.
pub mod op {
    pub const ANY: i8 = 1;
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
    pub const TWO_PHASE_COMMIT: i8 = 15;
}

/// Kafka's AclPermissionType codes.
pub mod permission {
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;
}

/// One ACL: who (principal, host) may or may not (permission) do what (operation) to which
/// resources (type, name, pattern type).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Binding {
    pub resource_type: i8,
    pub name: String,
    pub pattern: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

impl Binding {
    /// Why CreateAcls refuses this binding (INVALID_REQUEST), as Kafka's
    /// AclControlManager and AclApis check it; `None` if it may be created.
    pub fn invalid(&self) -> Option<String> {
        if !(resource::TOPIC..=resource::USER).contains(&self.resource_type) {
            return Some(format!("Invalid resourceType {}", self.resource_type));
        }
        if !matches!(self.pattern, pattern::LITERAL | pattern::PREFIXED) {
            return Some(format!("Invalid patternType {}", self.pattern));
        }
        if !(op::ALL..=op::TWO_PHASE_COMMIT).contains(&self.operation) {
            return Some(format!("Invalid operation {}", self.operation));
        }
        if !matches!(self.permission, permission::DENY | permission::ALLOW) {
            return Some(format!("Invalid permissionType {}", self.permission));
        }
        if self.name.is_empty() {
            return Some("Invalid empty resource name".into());
        }
        if self.resource_type == resource::CLUSTER && self.name != CLUSTER_NAME {
            return Some(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            ));
        }
        if !self.principal.contains(':') {
            return Some(format!(
                "Could not parse principal from `{}` (no colon is present separating the \
                 principal type from the principal name)",
                self.principal
            ));
        }
        None
    }

    /// Whether this binding's pattern covers the resource `(resource_type, name)`.
    fn covers(&self, resource_type: i8, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern {
                pattern::LITERAL => self.name == name || self.name == WILDCARD,
                pattern::PREFIXED => name.starts_with(self.name.as_str()),
                _ => false,
            }
    }
}

/// A filter of DescribeAcls and DeleteAcls: `None` and the ANY codes match everything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    pub resource_type: i8,
    pub name: Option<String>,
    pub pattern: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl Filter {
    /// Why the filter is refused (INVALID_REQUEST): an unknown code.
    pub fn invalid(&self) -> Option<String> {
        if !(resource::ANY..=resource::USER).contains(&self.resource_type) {
            return Some(format!("Invalid resourceType {}", self.resource_type));
        }
        if !(pattern::ANY..=pattern::PREFIXED).contains(&self.pattern) {
            return Some(format!("Invalid patternType {}", self.pattern));
        }
        if !(op::ANY..=op::TWO_PHASE_COMMIT).contains(&self.operation) {
            return Some(format!("Invalid operation {}", self.operation));
        }
        if !(permission::ANY..=permission::ALLOW).contains(&self.permission) {
            return Some(format!("Invalid permissionType {}", self.permission));
        }
        None
    }

    /// Kafka's AclBindingFilter.matches: ANY matches the exact name under any pattern
    /// type, MATCH every pattern that covers the name.
    pub fn matches(&self, b: &Binding) -> bool {
        let resource = self.resource_type == resource::ANY || self.resource_type == b.resource_type;
        let named = match (self.pattern, &self.name) {
            (pattern::MATCH, Some(name)) => match b.pattern {
                pattern::LITERAL => &b.name == name || b.name == WILDCARD,
                pattern::PREFIXED => name.starts_with(b.name.as_str()),
                _ => false,
            },
            (pattern::MATCH | pattern::ANY, None) => true,
            (pattern::ANY, Some(name)) => &b.name == name,
            (p, name) => p == b.pattern && name.as_ref().is_none_or(|n| n == &b.name),
        };
        let entry = self.principal.as_ref().is_none_or(|p| p == &b.principal)
            && self.host.as_ref().is_none_or(|h| h == &b.host)
            && (self.operation == op::ANY || self.operation == b.operation)
            && (self.permission == permission::ANY || self.permission == b.permission);
        resource && named && entry
    }
}

/// The authorizer's settings: `super.users` and `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub super_users: BTreeSet<String>,
    pub allow_if_no_acl: bool,
}

/// `super.users`: principals separated by `;`, each `Type:name`.
pub fn parse_super_users(value: &str) -> Result<BTreeSet<String>, String> {
    value
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once(':') {
            Some((t, n)) if !t.is_empty() && !n.is_empty() => Ok(p.to_string()),
            _ => Err(format!("`{p}` is not a principal of the form User:name")),
        })
        .collect()
}

/// Whether an ALLOW of `granted` permits `wanted`: ALL permits everything, READ, WRITE,
/// DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS.
fn allow_implies(granted: i8, wanted: i8) -> bool {
    granted == op::ALL
        || granted == wanted
        || (wanted == op::DESCRIBE
            && matches!(granted, op::READ | op::WRITE | op::DELETE | op::ALTER))
        || (wanted == op::DESCRIBE_CONFIGS && granted == op::ALTER_CONFIGS)
}

/// StandardAuthorizer's decision: super users may do anything; otherwise a matching DENY
/// wins over any ALLOW; with no matching ALLOW the answer is no, unless no binding at all
/// covers the resource and `allow.everyone.if.no.acl.found` is set.
pub fn authorize<'a>(
    settings: &Settings,
    bindings: impl IntoIterator<Item = &'a Binding>,
    principal: &str,
    host: &str,
    operation: i8,
    resource_type: i8,
    name: &str,
) -> bool {
    if settings.super_users.contains(principal) {
        return true;
    }
    let mut covered = false;
    let mut allowed = false;
    for b in bindings {
        if !b.covers(resource_type, name) {
            continue;
        }
        covered = true;
        let who = (b.principal == principal || b.principal == WILDCARD_PRINCIPAL)
            && (b.host == host || b.host == WILDCARD);
        if !who {
            continue;
        }
        match b.permission {
            permission::DENY if b.operation == op::ALL || b.operation == operation => return false,
            permission::ALLOW if allow_implies(b.operation, operation) => allowed = true,
            _ => {}
        }
    }
    allowed || (!covered && settings.allow_if_no_acl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(rt: i8, name: &str, pt: i8, who: &str, host: &str, o: i8, perm: i8) -> Binding {
        Binding {
            resource_type: rt,
            name: name.into(),
            pattern: pt,
            principal: who.into(),
            host: host.into(),
            operation: o,
            permission: perm,
        }
    }

    #[test]
    fn decisions_follow_the_standard_authorizer() {
        use pattern::*;
        use permission::*;
        let acls = [
            acl(
                resource::TOPIC,
                "orders",
                LITERAL,
                "User:alice",
                "*",
                op::READ,
                ALLOW,
            ),
            acl(
                resource::TOPIC,
                "pay-",
                PREFIXED,
                "User:*",
                "*",
                op::WRITE,
                ALLOW,
            ),
            acl(
                resource::TOPIC,
                "pay-secret",
                LITERAL,
                "User:bob",
                "*",
                op::ALL,
                DENY,
            ),
            acl(
                resource::TOPIC,
                "*",
                LITERAL,
                "User:carol",
                "10.0.0.1",
                op::ALTER_CONFIGS,
                ALLOW,
            ),
            acl(
                resource::GROUP,
                "g",
                LITERAL,
                "User:alice",
                "*",
                op::DESCRIBE,
                DENY,
            ),
        ];
        let s = Settings {
            super_users: BTreeSet::from(["User:admin".to_string()]),
            allow_if_no_acl: false,
        };
        let ok = |who: &str, host: &str, o: i8, rt: i8, name: &str| {
            authorize(&s, &acls, who, host, o, rt, name)
        };
        let t = resource::TOPIC;
        assert!(ok("User:alice", "1.2.3.4", op::READ, t, "orders"));
        assert!(
            ok("User:alice", "1.2.3.4", op::DESCRIBE, t, "orders"),
            "READ implies DESCRIBE"
        );
        assert!(!ok("User:alice", "1.2.3.4", op::WRITE, t, "orders"));
        assert!(
            !ok("User:bob", "1.2.3.4", op::READ, t, "orders"),
            "covered, not granted"
        );
        assert!(
            ok("User:bob", "1.2.3.4", op::WRITE, t, "pay-in"),
            "prefixed, wildcard principal"
        );
        assert!(
            !ok("User:bob", "1.2.3.4", op::WRITE, t, "pay-secret"),
            "DENY wins"
        );
        assert!(ok("User:alice", "1.2.3.4", op::WRITE, t, "pay-secret"));
        assert!(ok("User:carol", "10.0.0.1", op::DESCRIBE_CONFIGS, t, "x"));
        assert!(
            !ok("User:carol", "10.0.0.2", op::DESCRIBE_CONFIGS, t, "x"),
            "host must match"
        );
        assert!(!ok(
            "User:alice",
            "1.2.3.4",
            op::DESCRIBE,
            resource::GROUP,
            "g"
        ));
        assert!(
            !ok("User:alice", "1.2.3.4", op::READ, resource::GROUP, "g"),
            "a DENY of DESCRIBE still covers the group; READ is not granted"
        );
        assert!(ok(
            "User:admin",
            "1.2.3.4",
            op::ALL,
            resource::CLUSTER,
            CLUSTER_NAME
        ));
        // No binding covers the group "free": only allow.everyone.if.no.acl.found lets it.
        assert!(!ok(
            "User:bob",
            "1.2.3.4",
            op::READ,
            resource::GROUP,
            "free"
        ));
        let open = Settings {
            allow_if_no_acl: true,
            ..s.clone()
        };
        assert!(authorize(
            &open,
            &acls,
            "User:bob",
            "h",
            op::READ,
            resource::GROUP,
            "free"
        ));
        assert!(
            !authorize(&open, &acls, "User:bob", "h", op::READ, t, "orders"),
            "the flag does not apply once a binding covers the resource"
        );
    }

    #[test]
    fn filters_match_as_kafkas_binding_filters() {
        use pattern::{ANY, LITERAL, MATCH, PREFIXED};
        use permission::ALLOW;
        let lit = acl(
            resource::TOPIC,
            "orders",
            LITERAL,
            "User:a",
            "*",
            op::READ,
            ALLOW,
        );
        let wild = acl(
            resource::TOPIC,
            "*",
            LITERAL,
            "User:a",
            "*",
            op::READ,
            ALLOW,
        );
        let pre = acl(
            resource::TOPIC,
            "ord",
            PREFIXED,
            "User:a",
            "*",
            op::READ,
            ALLOW,
        );
        let f = |name: Option<&str>, pt: i8| Filter {
            resource_type: resource::ANY,
            name: name.map(str::to_string),
            pattern: pt,
            principal: None,
            host: None,
            operation: op::ANY,
            permission: permission::ANY,
        };
        let hits = |f: &Filter| [&lit, &wild, &pre].map(|b| f.matches(b));
        assert_eq!(hits(&f(None, ANY)), [true, true, true]);
        assert_eq!(hits(&f(Some("orders"), ANY)), [true, false, false]);
        assert_eq!(hits(&f(Some("orders"), MATCH)), [true, true, true]);
        assert_eq!(hits(&f(Some("other"), MATCH)), [false, true, false]);
        assert_eq!(hits(&f(Some("ord"), PREFIXED)), [false, false, true]);
        assert_eq!(hits(&f(None, LITERAL)), [true, true, false]);
        let mut by_op = f(None, ANY);
        by_op.operation = op::WRITE;
        assert_eq!(hits(&by_op), [false, false, false]);
    }

    #[test]
    fn creation_checks_and_super_users() {
        let mut b = acl(
            resource::CLUSTER,
            "other",
            pattern::LITERAL,
            "User:a",
            "*",
            op::ALTER,
            permission::ALLOW,
        );
        assert!(b.invalid().unwrap().contains(CLUSTER_NAME));
        b.name = CLUSTER_NAME.into();
        assert_eq!(b.invalid(), None);
        b.pattern = pattern::MATCH;
        assert!(b.invalid().is_some());
        b.pattern = pattern::LITERAL;
        b.principal = "alice".into();
        assert!(b.invalid().unwrap().contains("colon"));
        assert_eq!(
            parse_super_users("User:admin; User:broker;").unwrap(),
            BTreeSet::from(["User:admin".to_string(), "User:broker".to_string()])
        );
        assert!(parse_super_users("admin").is_err());
    }
}
