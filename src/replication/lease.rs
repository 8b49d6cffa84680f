//! A broker's lease on what it coordinates.
//!
//! The controller fences a broker whose heartbeats stop for `broker.session.timeout.ms`
//! and moves its leaderships. A broker cut off from the controller but not from clients does
//! not hear of that: its image still names it leader of its `__consumer_offsets`,
//! `__transaction_state` and `__share_group_state` partitions, and it would go on answering
//! OffsetFetch, JoinGroup or FindCoordinator from state a new coordinator has since changed
//! (a transactional copier that read its committed offsets there copied records twice).
//!
//! So a broker coordinates only while it holds a lease: a heartbeat the controller accepted
//! (not fenced) renews it until the heartbeat's send time plus the session timeout. The
//! controller's session for that heartbeat ends no earlier (it counts from receipt), so the
//! lease lapses before the controller can fence the broker. A renewal takes effect only once
//! the broker has applied the metadata the controller had when it answered: after a lapse
//! the broker first learns of any fence and leadership move, then coordinates again.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

pub struct Lease {
    timeout: Duration,
    /// The metadata offset this broker has applied.
    applied: watch::Receiver<i64>,
    state: Mutex<State>,
}

/// Renewals kept waiting for metadata at most (the oldest go first; each later one holds
/// longer).
const PENDING: usize = 8;

#[derive(Default)]
struct State {
    /// Held until then.
    until: Option<Instant>,
    /// Renewals waiting for this broker to apply the metadata offset each names.
    pending: VecDeque<(Instant, i64)>,
    /// Whether the last look found it held (a change is logged).
    held: bool,
}

impl Lease {
    pub fn new(timeout: Duration, applied: watch::Receiver<i64>) -> Lease {
        Lease {
            timeout,
            applied,
            state: Mutex::new(State::default()),
        }
    }

    /// The controller accepted a heartbeat sent at `sent`, answering from metadata offset
    /// `metadata_offset`.
    pub fn renewed(&self, sent: Instant, metadata_offset: i64) {
        let until = sent + self.timeout;
        let applied = *self.applied.borrow();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.pending.len() == PENDING {
            s.pending.pop_front();
        }
        s.pending.push_back((until, metadata_offset));
        s.promote(applied);
    }

    /// The controller answered that this broker is fenced or not registered.
    pub fn lost(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.until = None;
        s.pending.clear();
    }

    /// Whether this broker may coordinate now.
    pub fn holds(&self) -> bool {
        let applied = *self.applied.borrow();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.promote(applied);
        let held = s.until.is_some_and(|u| Instant::now() < u);
        if held != s.held {
            s.held = held;
            match held {
                true => tracing::info!("coordinator lease held: coordinating again"),
                false => tracing::warn!(
                    applied,
                    waiting_for = ?s.pending.back().map(|p| p.1),
                    "coordinator lease lapsed (no heartbeat accepted within the session timeout): not coordinating"
                ),
            }
        }
        held
    }
}

impl State {
    /// Takes the pending renewals `applied` covers.
    fn promote(&mut self, applied: i64) {
        let mut until = self.until;
        self.pending.retain(|&(u, offset)| {
            let covered = applied >= offset;
            if covered {
                until = Some(until.map_or(u, |t| t.max(u)));
            }
            !covered
        });
        self.until = until;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(3);

    #[tokio::test(start_paused = true)]
    async fn held_from_an_accepted_heartbeat_until_the_session_could_end() {
        let (_applied, rx) = watch::channel(10);
        let lease = Lease::new(TIMEOUT, rx);
        assert!(!lease.holds(), "no heartbeat accepted yet");
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(200)).await;
        lease.renewed(sent, 10);
        assert!(lease.holds());
        tokio::time::advance(Duration::from_millis(2700)).await;
        assert!(lease.holds(), "2.9 s after sending");
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(
            !lease.holds(),
            "3 s after sending: the controller may fence now"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_waits_for_the_metadata_the_controller_answered_from() {
        let (applied, rx) = watch::channel(10);
        let lease = Lease::new(TIMEOUT, rx);
        lease.renewed(Instant::now(), 10);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!lease.holds(), "lapsed");
        // Back in touch: the controller fenced this broker and moved its leaderships at 12,
        // then unfenced it at 13 and answers from 13.
        lease.renewed(Instant::now(), 13);
        assert!(!lease.holds(), "not before the fence and moves are applied");
        applied.send_replace(12);
        assert!(!lease.holds());
        applied.send_replace(13);
        assert!(lease.holds());
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_lease_is_kept_while_a_renewal_catches_up() {
        let (applied, rx) = watch::channel(10);
        let lease = Lease::new(TIMEOUT, rx);
        lease.renewed(Instant::now(), 10);
        tokio::time::advance(Duration::from_secs(1)).await;
        lease.renewed(Instant::now(), 11);
        assert!(lease.holds(), "the earlier renewal still runs");
        tokio::time::advance(Duration::from_millis(2500)).await;
        assert!(
            !lease.holds(),
            "3.5 s: the later renewal is not applied yet"
        );
        applied.send_replace(11);
        assert!(lease.holds(), "until 4 s");
    }

    #[tokio::test(start_paused = true)]
    async fn renewed_while_the_metadata_applied_trails_the_controller() {
        // Every answer names an offset one past what the broker has applied by then; each
        // is applied before the next heartbeat.
        let (applied, rx) = watch::channel(10);
        let lease = Lease::new(TIMEOUT, rx);
        for n in 0..20 {
            lease.renewed(Instant::now(), 11 + n);
            applied.send_replace(10 + n);
            tokio::time::advance(Duration::from_millis(500)).await;
            if n > 0 {
                assert!(lease.holds(), "heartbeat {n}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fenced_means_lost_at_once() {
        let (_applied, rx) = watch::channel(10);
        let lease = Lease::new(TIMEOUT, rx);
        lease.renewed(Instant::now(), 10);
        assert!(lease.holds());
        lease.lost();
        assert!(!lease.holds());
    }
}
