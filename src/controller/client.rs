//! The broker's side of asking the controller: [`ControllerClient`] asks the local voter
//! directly while it is the active controller (always, on a quorum of one); otherwise it
//! finds the active controller among the voters, follows its hints, and sends it
//! [`BrokerRequest`]s over the controller listener.

use std::time::Duration;

use tokio::time::Instant;

use super::network::{read_frame, write_frame, Reply, Rpc};
use super::rpc::{BrokerReply, BrokerRequest};
use super::service::ControllerNode;
use crate::config::Voter;

/// How long one voter gets to answer before the next is tried.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);

/// The broker's way to the active controller.
pub struct ControllerClient {
    local: std::sync::Arc<ControllerNode>,
    /// The other voters, reached over the network.
    voters: Vec<Voter>,
    leader: std::sync::Mutex<Option<i32>>,
}

impl ControllerClient {
    pub fn new(local: std::sync::Arc<ControllerNode>, voters: &[Voter]) -> ControllerClient {
        let voters = voters
            .iter()
            .filter(|v| v.id != local.id())
            .cloned()
            .collect();
        ControllerClient {
            local,
            voters,
            leader: std::sync::Mutex::new(None),
        }
    }

    fn leader(&self) -> Option<i32> {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_leader(&self, id: Option<i32>) {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = id;
    }

    async fn call_one(&self, voter: &Voter, req: &BrokerRequest) -> std::io::Result<BrokerReply> {
        let addr = format!("{}:{}", voter.host, voter.port);
        let connect = self.local.dial.connect(&addr);
        let mut s = tokio::time::timeout(Duration::from_secs(2), connect)
            .await
            .map_err(|_| std::io::Error::other(format!("connecting to {addr} timed out")))??;
        write_frame(&mut s, &Rpc::Broker(req.clone())).await?;
        match read_frame(&mut s).await? {
            Reply::Broker(r) => Ok(r),
            _ => Err(std::io::Error::other("answer does not match the request")),
        }
    }

    /// Sends `req` to the active controller, trying voters in turn and following hints,
    /// until it answers or `timeout` passes (then `None`).
    pub async fn call(&self, req: BrokerRequest, timeout: Duration) -> Option<BrokerReply> {
        let deadline = Instant::now() + timeout;
        let mut next = 0usize;
        loop {
            if self.local.is_active() {
                match self.local.handle(req.clone()).await {
                    // Leadership is changing under us: give the election a moment.
                    BrokerReply::NotController { .. } => {
                        tokio::time::sleep(Duration::from_millis(20)).await
                    }
                    reply => return Some(reply),
                }
            }
            let known = self.leader().or(self.local.leader());
            let remote = known.and_then(|l| self.voters.iter().find(|v| v.id == l));
            let voter = match remote {
                Some(v) => v.clone(),
                // No other voter leads as far as we know: wait for an election (the local
                // voter learns its outcome), then ask whoever won.
                None if self.voters.is_empty() || known == Some(self.local.id()) => {
                    self.set_leader(None);
                    let wait = deadline.min(Instant::now() + Duration::from_millis(100));
                    self.local.await_leader(None, wait).await;
                    if Instant::now() >= deadline {
                        return None;
                    }
                    continue;
                }
                None => {
                    next += 1;
                    self.voters[next % self.voters.len()].clone()
                }
            };
            // A voter that is stopped (SIGSTOP, a hung host) still accepts connections, so
            // each attempt is bounded well under a broker session; then the next voter.
            let attempt = deadline.min(Instant::now() + ATTEMPT_TIMEOUT);
            let answer = tokio::time::timeout_at(attempt, self.call_one(&voter, &req))
                .await
                .unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no answer in time",
                    ))
                });
            match answer {
                Ok(BrokerReply::NotController { leader }) => {
                    let hint = leader.filter(|l| *l != voter.id);
                    self.set_leader(hint);
                    if hint.is_none() {
                        let wait = deadline.min(Instant::now() + Duration::from_millis(100));
                        self.local.await_leader(Some(voter.id), wait).await;
                    }
                }
                Ok(reply) => {
                    self.set_leader(Some(voter.id));
                    return Some(reply);
                }
                Err(e) => {
                    tracing::debug!(voter = voter.id, error = %e, "controller call failed");
                    self.set_leader(None);
                    next = self
                        .voters
                        .iter()
                        .position(|v| v.id == voter.id)
                        .unwrap_or(next);
                    // A timeout already waited; a refused or broken connection waits a bit.
                    if e.kind() != std::io::ErrorKind::TimedOut {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }
}
