//! The cluster controller (issue: replicated cluster). So far its core: the metadata state
//! machine in [`metadata`], pure and unit-tested. Still to come around it: the openraft
//! quorum that orders its records (log and vote in RocksDB, fsynced), the RPCs that feed it
//! (BrokerRegistration, BrokerHeartbeat, AlterPartition), and brokers applying the
//! committed log in order. A single node without `controller.quorum.voters` does not use it.

pub mod metadata;
pub mod raft;
