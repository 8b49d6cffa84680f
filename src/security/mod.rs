//! Security mechanics with no state of their own, used by the layers above: SCRAM's
//! credentials and exchange ([`scram`]), OAUTHBEARER's unsecured tokens ([`oauthbearer`]),
//! a connection's SASL authentication ([`sasl`]),
//! and ACLs with the StandardAuthorizer's decision ([`acl`]).

pub mod acl;
pub mod oauthbearer;
pub mod sasl;
pub mod scram;
