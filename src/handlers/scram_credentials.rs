//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), what
//! `kafka-configs --entity-type users` sends for `SCRAM-SHA-256=[password=...]`. The
//! client salts the password itself; the controller keeps StoredKey and ServerKey, never
//! the password, and answers per user (`Image::alter_scram`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::controller::metadata::ScramUpsertion;
use crate::security::scram::Mechanism;

pub async fn alter(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let users: Vec<String> = req
        .deletions
        .iter()
        .map(|d| d.name.to_string())
        .chain(req.upsertions.iter().map(|u| u.name.to_string()))
        .collect();
    let deletions = req
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .collect();
    let upsertions = req
        .upsertions
        .iter()
        .map(|u| ScramUpsertion {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        })
        .collect();
    // Kafka's check: ALTER on the cluster, else every user is refused.
    let decided = match ctx.may_on_cluster(broker, crate::security::acl::op::ALTER) {
        true => broker.alter_scram(deletions, upsertions).await,
        false => Err(crate::error::Error::Authorization(
            ResponseError::ClusterAuthorizationFailed,
        )),
    };
    let results = match decided {
        Ok(results) => results
            .into_iter()
            .map(|r| {
                AlterUserScramCredentialsResult::default()
                    .with_user(str_bytes(r.user))
                    .with_error_code(r.error)
                    .with_error_message(r.message.map(str_bytes))
            })
            .collect(),
        // Nothing was decided: every user gets the error.
        Err(e) => {
            let mut seen = std::collections::BTreeSet::new();
            users
                .into_iter()
                .filter(|u| seen.insert(u.clone()))
                .map(|u| {
                    AlterUserScramCredentialsResult::default()
                        .with_user(str_bytes(u))
                        .with_error_code(e.code())
                        .with_error_message(Some(str_bytes(e.to_string())))
                })
                .collect()
        }
    };
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// Every user with a credential when no user is named (null or empty), else the named
/// ones: RESOURCE_NOT_FOUND for a user with none, DUPLICATE_RESOURCE for one named twice,
/// as Kafka's ScramImage answers. Only mechanisms and iterations are shown.
pub async fn describe(
    broker: &Arc<Broker>,
    ctx: &RequestContext<'_>,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    // Kafka's check: DESCRIBE on the cluster.
    if !ctx.may_on_cluster(broker, crate::security::acl::op::DESCRIBE) {
        let e = ResponseError::ClusterAuthorizationFailed;
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(e.to_string())));
    }
    // User -> named more than once.
    let mut asked: BTreeMap<String, bool> = BTreeMap::new();
    match req.users.as_deref() {
        None | Some([]) => {
            for user in broker.scram_users() {
                asked.insert(user, false);
            }
        }
        Some(users) => {
            for u in users {
                let twice = asked.contains_key(u.name.as_str());
                asked.insert(u.name.to_string(), twice);
            }
        }
    }
    let results = asked
        .into_iter()
        .map(|(user, twice)| {
            let result = DescribeUserScramCredentialsResult::default().with_user(str_bytes(&user));
            let failed = |e: ResponseError, message: String| {
                result
                    .clone()
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(message)))
            };
            if twice {
                return failed(
                    ResponseError::DuplicateResource,
                    format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                    ),
                );
            }
            let infos: Vec<CredentialInfo> = broker
                .scram_credentials(&user)
                .iter()
                .filter_map(|(name, c)| {
                    Some(
                        CredentialInfo::default()
                            .with_mechanism(Mechanism::from_name(name)?.wire())
                            .with_iterations(c.iterations),
                    )
                })
                .collect();
            if infos.is_empty() {
                return failed(
                    ResponseError::ResourceNotFound,
                    format!("Attempt to describe a user credential that does not exist: {user}"),
                );
            }
            result.with_credential_infos(infos)
        })
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}
