//! Security mechanics with no state of their own, used by the layers above: SCRAM's
//! credentials and exchange ([`scram`]), a connection's SASL authentication ([`sasl`]),
//! and ACLs with the StandardAuthorizer's decision ([`acl`]).

pub mod acl;
pub mod sasl;
pub mod scram;
