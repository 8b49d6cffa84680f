//! Store read slots, shared out fairly among connections.
//!
//! At most one store read per core runs at once (fetches read on tokio's blocking pool,
//! which would otherwise grow a thread per read and starve every other request, see
//! docs/FLOOD.md). A read waiting for a slot is not served first come first served but by
//! start-time fair queueing over the bytes read: each connection is a reader
//! ([`as_one_reader`]) with a virtual clock of the bytes it has been given, and the slot goes
//! to the waiting read whose connection's clock is furthest behind. A connection that reads
//! now and then starts at the queue's clock and goes ahead of every greedy connection that
//! has read more; the greedy ones take turns by bytes. Reads outside a connection (the log
//! cleaner's) start at the queue's clock, so they come in order. Large reads are taken in
//! pieces (`log::STORE_READ_PIECE`), each waiting its turn, so no read holds a slot for long.
//! Kafka is fair by construction here: its network threads send one connection's bytes
//! after another's.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

tokio::task_local! {
    /// The connection the running task serves: the virtual time (in bytes read) at which
    /// its last read ended.
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
    /// The queue's virtual time: the start of the latest read given a slot.
    clock: u64,
    seq: u64,
    waiting: Vec<Waiter>,
}

struct Waiter {
    /// Its virtual start: where its reader's last read ended, or the queue's clock if that
    /// is later (a reader that was idle does not bank a credit).
    start: u64,
    /// Arrival order, among reads with the same start.
    seq: u64,
    grant: oneshot::Sender<()>,
}

/// A slot held: given to the next waiting read when dropped.
pub struct Slot<'a> {
    slots: &'a ReadSlots,
    reader: Option<Arc<AtomicU64>>,
    start: u64,
}

impl Slot<'_> {
    /// Counts `bytes` read in this slot to its reader: its next read starts after them.
    pub fn charge(&self, bytes: usize) {
        if let Some(r) = &self.reader {
            r.store(self.start + bytes as u64, Ordering::Relaxed);
        }
    }
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
                clock: 0,
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
        let (rx, start) = {
            let mut s = self.lock();
            // Reads that stopped waiting (their request went away) hold no turn.
            s.waiting.retain(|w| !w.grant.is_closed());
            let start = reader
                .as_ref()
                .map_or(s.clock, |r| r.load(Ordering::Relaxed).max(s.clock));
            if s.free > 0 {
                s.free -= 1;
                s.clock = start;
                return Slot {
                    slots: self,
                    reader,
                    start,
                };
            }
            let (grant, rx) = oneshot::channel();
            s.seq += 1;
            let seq = s.seq;
            s.waiting.push(Waiter { start, seq, grant });
            (rx, start)
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
        Slot {
            slots: self,
            reader,
            start,
        }
    }

    /// A slot came free: the waiting read with the earliest virtual start gets it.
    fn release(&self) {
        let mut s = self.lock();
        loop {
            let Some(next) =
                (0..s.waiting.len()).min_by_key(|&i| (s.waiting[i].start, s.waiting[i].seq))
            else {
                s.free += 1;
                return;
            };
            let w = s.waiting.swap_remove(next);
            s.clock = s.clock.max(w.start);
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

    /// A read of `bytes` by `reader`, in a slot had at once.
    async fn read(slots: &ReadSlots, reader: &Arc<AtomicU64>, bytes: usize) {
        let slot = READER.scope(reader.clone(), slots.acquire()).await;
        slot.charge(bytes);
    }

    #[tokio::test]
    async fn the_reader_behind_in_bytes_goes_first() {
        const PIECE: usize = 4 << 20;
        let slots = ReadSlots::new(1);
        let (greedy, other, catching_up) = (reader(), reader(), reader());
        // The greedy connections have read two pieces each, the catching-up one a batch.
        for _ in 0..2 {
            read(&slots, &greedy, PIECE).await;
            read(&slots, &other, PIECE).await;
        }
        read(&slots, &catching_up, 1 << 20).await;
        let held = slots.acquire().await;
        // The greedy ones wait, then the catching-up connection comes.
        let mut g = Box::pin(READER.scope(greedy.clone(), slots.acquire()));
        let mut o = Box::pin(READER.scope(other.clone(), slots.acquire()));
        let mut c = Box::pin(READER.scope(catching_up.clone(), slots.acquire()));
        assert!(poll!(&mut g).is_pending());
        assert!(poll!(&mut o).is_pending());
        assert!(poll!(&mut c).is_pending());
        drop(held);
        let Poll::Ready(slot) = poll!(&mut c) else {
            panic!("the connection that read least waits")
        };
        assert!(poll!(&mut g).is_pending());
        slot.charge(1 << 20);
        drop(slot);
        // Then the greedy ones, in the order they came; each piece puts its reader behind
        // the other.
        let Poll::Ready(slot) = poll!(&mut g) else {
            panic!("the first greedy read waits")
        };
        slot.charge(PIECE);
        let mut g = Box::pin(READER.scope(greedy.clone(), slots.acquire()));
        assert!(poll!(&mut g).is_pending());
        drop(slot);
        assert!(
            poll!(&mut g).is_pending(),
            "the greedy reader went twice in a row"
        );
        let Poll::Ready(slot) = poll!(&mut o) else {
            panic!("the other greedy read waits")
        };
        drop(slot);
        assert!(poll!(&mut g).is_ready());
    }

    #[tokio::test]
    async fn an_idle_reader_banks_no_credit() {
        let slots = ReadSlots::new(1);
        let (busy, idle) = (reader(), reader());
        for _ in 0..10 {
            read(&slots, &busy, 1000).await;
        }
        // The idle one comes back after 10,000 bytes of the other's: it starts at the
        // queue's clock, not at 0, so it does not get the next ten turns in a row.
        read(&slots, &idle, 1).await;
        read(&slots, &idle, 1000).await;
        let held = slots.acquire().await;
        let mut i = Box::pin(READER.scope(idle.clone(), slots.acquire()));
        let mut b = Box::pin(READER.scope(busy.clone(), slots.acquire()));
        assert!(poll!(&mut i).is_pending());
        assert!(poll!(&mut b).is_pending());
        drop(held);
        assert!(
            poll!(&mut b).is_ready(),
            "the reader that was idle went ahead of one that had read no more than it since"
        );
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
