//! Security mechanics with no state of their own, used by the layers above: SCRAM's
//! credentials and exchange ([`scram`]), and a connection's SASL authentication
//! ([`sasl`]).

pub mod sasl;
pub mod scram;
