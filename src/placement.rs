//! A partition's place in the cluster: leader, replicas, ISR and epochs as this broker last
//! applied them from the metadata image, and, on the leader, what each follower last told it
//! by fetching. The catalog holds one [`Replica`] per partition; replication fills it in.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::time::Instant;
use uuid::Uuid;

use crate::error::{Error, Result};

/// A partition's place in the cluster as this broker last applied it from the image.
#[derive(Debug, Clone)]
pub struct Assignment {
    pub topic_id: Uuid,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Replicas on brokers that are fenced or gone.
    pub offline: Vec<i32>,
    /// On the leader: what each follower last told us by fetching.
    pub(crate) followers: HashMap<i32, Progress>,
    /// An AlterPartition for this partition is with the controller.
    pub(crate) alter_in_flight: bool,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    pub(crate) leo: i64,
    pub(crate) last_caught_up: Instant,
    pub(crate) last_fetch: Instant,
    pub(crate) leader_leo_at_last_fetch: i64,
}

/// A partition's replication state, as the metadata image last gave it (`None` until the
/// broker has applied the partition's record).
#[derive(Default)]
pub struct Replica(Mutex<Option<Assignment>>);

impl Replica {
    pub fn get(&self) -> Option<Assignment> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// NOT_LEADER_OR_FOLLOWER unless node `me` leads.
    pub fn check_leader(&self, me: i32) -> Result<()> {
        match self.lock().as_ref() {
            Some(a) if a.leader == me => Ok(()),
            _ => Err(Error::NotLeaderOrFollower),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Option<Assignment>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Who holds a partition, by node id.
pub struct Placement {
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline: Vec<i32>,
    pub leader_epoch: i32,
}
