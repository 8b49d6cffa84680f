//! Store read slots, shared out fairly among connections.
//!
//! At most one store read per core runs at once (fetches read on tokio's blocking pool,
//! which would otherwise grow a thread per read and starve every other request, see
//! docs/FLOOD.md). A read waiting for a slot is not served first come first served: the
//! slot goes to the waiting read whose connection was last given one longest ago, so a
//! consumer catching up with one read does not queue behind every read of the greedy
//! connections that came before it. Each connection is a reader ([`as_one_reader`]);
//! reads outside one (the log cleaner's) count as given a slot when they start waiting.
//! Large reads are taken in pieces (`log::STORE_READ_PIECE`), each waiting its turn, so no
//! read holds a slot for long. Kafka is fair by construction here: its network threads
//! send one connection's bytes after another's.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

tokio::task_local! {
    /// The connection the running task serves: when it was last given a slot (a tick).
    static READER: Arc<AtomicU64>;
}

/// Runs `f` (a connection's requests) as one reader: its reads take turns with other
/// connections' rather than queueing behind them.
pub async fn as_one_reader<F: Future>(f: F) -> F::Output {
    READER.scope(Arc::new(AtomicU64::new(0)), f).await
}

pub struct ReadSlots {
    inner: Mutex<Inner>,
}

struct Inner {
    free: usize,
    /// Counts slots given, to order readers by when they last got one.
    tick: u64,
    seq: u64,
    waiting: Vec<Waiter>,
}

struct Waiter {
    reader: Option<Arc<AtomicU64>>,
    /// The tick when it started waiting: the turn of a read outside any connection.
    since: u64,
    /// Arrival order, among readers last served at the same tick.
    seq: u64,
    grant: oneshot::Sender<()>,
}

impl Waiter {
    fn turn(&self) -> (u64, u64) {
        let last = self
            .reader
            .as_ref()
            .map_or(self.since, |r| r.load(Ordering::Relaxed));
        (last, self.seq)
    }
}

/// A slot held: given to the next waiting read when dropped.
pub struct Slot<'a> {
    slots: &'a ReadSlots,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.slots.release();
    }
}

/// A read waiting for a slot; if it is dropped once given one, the slot goes on.
struct Waiting<'a> {
    rx: oneshot::Receiver<()>,
    slots: &'a ReadSlots,
    given: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.given {
            self.rx.close();
            if self.rx.try_recv().is_ok() {
                self.slots.release();
            }
        }
    }
}

impl ReadSlots {
    pub fn new(slots: usize) -> ReadSlots {
        ReadSlots {
            inner: Mutex::new(Inner {
                free: slots,
                tick: 0,
                seq: 0,
                waiting: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a slot, in the running connection's turn.
    pub async fn acquire(&self) -> Slot<'_> {
        let reader = READER.try_with(|r| r.clone()).ok();
        let rx = {
            let mut s = self.lock();
            // Reads that stopped waiting (their request went away) hold no turn.
            s.waiting.retain(|w| !w.grant.is_closed());
            if s.free > 0 {
                s.free -= 1;
                s.tick += 1;
                if let Some(r) = &reader {
                    r.store(s.tick, Ordering::Relaxed);
                }
                return Slot { slots: self };
            }
            let (grant, rx) = oneshot::channel();
            s.seq += 1;
            let (since, seq) = (s.tick, s.seq);
            s.waiting.push(Waiter {
                reader,
                since,
                seq,
                grant,
            });
            rx
        };
        let mut waiting = Waiting {
            rx,
            slots: self,
            given: false,
        };
        // The sender is dropped only once given, or by `retain` when the receiver closed:
        // an error here cannot happen while this future waits.
        let _ = (&mut waiting.rx).await;
        waiting.given = true;
        Slot { slots: self }
    }

    /// A slot came free: the waiting read whose reader was given one longest ago gets it.
    fn release(&self) {
        let mut s = self.lock();
        loop {
            let Some(next) = (0..s.waiting.len()).min_by_key(|&i| s.waiting[i].turn()) else {
                s.free += 1;
                return;
            };
            let w = s.waiting.swap_remove(next);
            s.tick += 1;
            if let Some(r) = &w.reader {
                r.store(s.tick, Ordering::Relaxed);
            }
            if w.grant.send(()).is_ok() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::{poll, FutureExt};
    use std::task::Poll;

    fn reader() -> Arc<AtomicU64> {
        Arc::new(AtomicU64::new(0))
    }

    #[tokio::test]
    async fn the_reader_served_longest_ago_goes_first() {
        let slots = ReadSlots::new(1);
        let (greedy, catching_up) = (reader(), reader());
        // The greedy connection has just read; then the other one reads, then the slot is
        // taken (by the cleaner, say).
        drop(READER.scope(catching_up.clone(), slots.acquire()).await);
        drop(READER.scope(greedy.clone(), slots.acquire()).await);
        let held = slots.acquire().await;
        // Two greedy reads wait, then the catching-up connection's.
        let mut g1 = Box::pin(READER.scope(greedy.clone(), slots.acquire()));
        let mut g2 = Box::pin(READER.scope(greedy.clone(), slots.acquire()));
        let mut c = Box::pin(READER.scope(catching_up.clone(), slots.acquire()));
        assert!(poll!(&mut g1).is_pending());
        assert!(poll!(&mut g2).is_pending());
        assert!(poll!(&mut c).is_pending());
        drop(held);
        let Poll::Ready(slot) = poll!(&mut c) else {
            panic!("the connection served longest ago waits")
        };
        assert!(poll!(&mut g1).is_pending());
        drop(slot);
        // Then the greedy ones, in the order they came.
        let Poll::Ready(slot) = poll!(&mut g1) else {
            panic!("the first greedy read waits")
        };
        assert!(poll!(&mut g2).is_pending());
        drop(slot);
        assert!(poll!(&mut g2).is_ready());
    }

    #[tokio::test]
    async fn reads_outside_connections_come_in_order() {
        let slots = ReadSlots::new(1);
        let held = slots.acquire().await;
        let mut a = Box::pin(slots.acquire());
        let mut b = Box::pin(slots.acquire());
        assert!(poll!(&mut a).is_pending());
        assert!(poll!(&mut b).is_pending());
        drop(held);
        assert!(poll!(&mut b).is_pending());
        let Poll::Ready(slot) = poll!(&mut a) else {
            panic!("the first waiting read waits")
        };
        drop(slot);
        assert!(poll!(&mut b).is_ready());
    }

    #[tokio::test]
    async fn a_read_that_stops_waiting_keeps_no_slot() {
        let slots = ReadSlots::new(1);
        let held = slots.acquire().await;
        // Gone before a slot came free.
        let mut gone = Box::pin(slots.acquire());
        assert!(poll!(&mut gone).is_pending());
        drop(gone);
        // Gone after one was given to it, before it saw it.
        let mut given = Box::pin(slots.acquire());
        assert!(poll!(&mut given).is_pending());
        drop(held);
        drop(given);
        let slot = slots.acquire().now_or_never().expect("a free slot");
        drop(slot);
        assert_eq!(slots.lock().free, 1);
        assert!(slots.lock().waiting.is_empty());
    }
}
