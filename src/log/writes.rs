//! Group commit: the appends of every partition of one log directory that arrive while a
//! write is under way go to the store together, in one write on one blocking thread.
//!
//! A produce request appends each of its partitions concurrently, and several connections
//! append at once. Written one by one, each append was a hop to the blocking pool and a
//! RocksDB write of its own, whose threads then met in RocksDB's write group. Here the
//! first append to find no write under way becomes the writer: on a blocking thread it
//! writes everything queued, then what queued meanwhile, until the queue is empty. Each
//! append is answered as soon as its group is written. A small append that finds no write
//! under way is written where it is made, on the runtime thread, unless the store would
//! have to wait ([`Writer::append_here`]).
//!
//! A partition's order is kept by its caller: `PartitionLog` holds the partition's append
//! lock until the write is done, so one partition never has two appends in the queue.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::storage::{Append, LogStore};

/// At most this many bytes of batches go into one write; past it, the rest waits for the
/// next one (the first append of a group goes in whatever its size).
const GROUP_BYTES: usize = 16 << 20;

/// Appends of at most this many bytes may be written on the runtime thread
/// ([`Writer::append_here`]): about a tenth of a millisecond of copying and checksums.
const HERE_BYTES: usize = 256 << 10;

pub struct Writer {
    store: Arc<dyn LogStore>,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// A blocking thread is writing and will take what is queued before it stops.
    writing: bool,
}

struct Waiting {
    appends: Vec<Append>,
    durable: bool,
    /// The write's result and this append's share of the time it took.
    done: oneshot::Sender<(Result<()>, Duration)>,
}

impl Writer {
    pub fn new(store: Arc<dyn LogStore>) -> Arc<Writer> {
        Arc::new(Writer {
            store,
            queue: Mutex::new(Queue::default()),
        })
    }

    pub fn store(&self) -> &Arc<dyn LogStore> {
        &self.store
    }

    /// Writes `appends` atomically (durable: flushed to the device too), in one store write
    /// with whatever else is waiting; returns once they are written. Its share of the
    /// write's time is charged to the request, as a blocking call's would be.
    pub async fn append(self: &Arc<Self>, appends: Vec<Append>, durable: bool) -> Result<()> {
        let appends = match self.append_here(appends, durable) {
            Ok(r) => return r,
            Err(appends) => appends,
        };
        let (done, written) = oneshot::channel();
        let lead = {
            let mut q = self.lock();
            q.waiting.push(Waiting {
                appends,
                durable,
                done,
            });
            !std::mem::replace(&mut q.writing, true)
        };
        if lead {
            self.start_drain();
        }
        let (result, took) = written
            .await
            .map_err(|_| Error::Storage("the log writer stopped".into()))?;
        crate::thread_time::charge(took);
        result
    }

    /// A small append that finds no write under way is written on the calling (runtime)
    /// thread, unless the store would have to wait first: the hop to a blocking thread and
    /// back cost more than the write itself (at 1,500 produce requests a second of 30 KB,
    /// the broker switched threads about six times per request). Appends that queue
    /// meanwhile are written by a blocking thread started after it. `Err` gives back the
    /// appends it did not write.
    fn append_here(
        self: &Arc<Self>,
        appends: Vec<Append>,
        durable: bool,
    ) -> std::result::Result<Result<()>, Vec<Append>> {
        let bytes: usize = appends.iter().map(|a| a.batch.len()).sum();
        if durable || bytes > HERE_BYTES {
            return Err(appends);
        }
        {
            let mut q = self.lock();
            if q.writing {
                return Err(appends);
            }
            q.writing = true;
        }
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| self.store.append_now(&appends)))
            .unwrap_or_else(|_| Err(Error::Storage("the storage write panicked".into())));
        // No longer the writer: appends that queued meanwhile go to a blocking thread.
        {
            let mut q = self.lock();
            if q.waiting.is_empty() {
                q.writing = false;
            } else {
                drop(q);
                self.start_drain();
            }
        }
        match result {
            Ok(true) => Ok(Ok(())),
            // The store would wait: the append queues as any other.
            Ok(false) => Err(appends),
            Err(e) => Ok(Err(e)),
        }
    }

    fn start_drain(self: &Arc<Self>) {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.drain());
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes groups until nothing is waiting.
    fn drain(&self) {
        loop {
            let group = {
                let mut q = self.lock();
                if q.waiting.is_empty() {
                    q.writing = false;
                    return;
                }
                let n = group_len(&q.waiting);
                q.waiting.drain(..n).collect::<Vec<_>>()
            };
            let durable = group.iter().any(|w| w.durable);
            let mut appends = Vec::with_capacity(group.iter().map(|w| w.appends.len()).sum());
            let mut answers = Vec::with_capacity(group.len());
            for w in group {
                appends.extend(w.appends);
                answers.push(w.done);
            }
            let started = Instant::now();
            // A panic in the store is that write's error, not the end of the writer (the
            // queue would wait for it forever).
            let result =
                std::panic::catch_unwind(AssertUnwindSafe(|| self.store.append(&appends, durable)))
                    .unwrap_or_else(|_| Err(Error::Storage("the storage write panicked".into())));
            let share = started.elapsed() / answers.len() as u32;
            for done in answers {
                let r = match &result {
                    Ok(()) => Ok(()),
                    Err(Error::Storage(m)) => Err(Error::Storage(m.clone())),
                    Err(e) => Err(Error::Storage(e.to_string())),
                };
                // The appender may have gone (its request was dropped): nothing to answer.
                let _ = done.send((r, share));
            }
        }
    }
}

/// How many of `waiting`, from the front, go into one write: at least one, then while the
/// batches fit in [`GROUP_BYTES`].
fn group_len(waiting: &[Waiting]) -> usize {
    let mut bytes = 0usize;
    let mut n = 0;
    for w in waiting {
        bytes += w.appends.iter().map(|a| a.batch.len()).sum::<usize>();
        if n > 0 && bytes > GROUP_BYTES {
            break;
        }
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStore;
    use crate::storage::{AbortedTxn, BatchMeta, PartitionId};
    use bytes::Bytes;
    use futures_util::future::join_all;

    /// The in-memory store, counting its writes and the appends each carried, or failing
    /// every write.
    #[derive(Default)]
    struct Counting {
        inner: MemoryStore,
        writes: Mutex<Vec<usize>>,
        fail: bool,
        /// The first write waits for a message on this.
        hold_first: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
        /// What `append_now` does: `None` cannot tell, `Some(true)` writes, `Some(false)`
        /// would stall.
        here: Option<bool>,
        /// The appends of each `append_now` that wrote, and the threads it ran on.
        here_writes: Mutex<Vec<(usize, std::thread::ThreadId)>>,
    }

    fn append(partition: u32, offset: i64, size: usize) -> Append {
        Append {
            partition,
            meta: BatchMeta {
                base_offset: offset,
                last_offset: offset,
                max_timestamp: 0,
                size: size as u32,
            },
            batch: Bytes::from(vec![0u8; size]),
            producer: None,
            epoch_start: None,
            aborted: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_that_queue_during_a_write_share_the_next_one() {
        let (release, hold) = std::sync::mpsc::channel();
        let store = Arc::new(Counting {
            hold_first: Mutex::new(Some(hold)),
            ..Counting::default()
        });
        let writer = Writer::new(store.clone());
        // 64 partitions at once, as a produce request's partitions are appended.
        let all = tokio::spawn({
            let writer = writer.clone();
            join_all((0..64u32).map(move |p| {
                let writer = writer.clone();
                async move { writer.append(vec![append(p, 0, 100)], false).await }
            }))
        });
        // The first append's write is held until the other 63 wait behind it.
        let writing = || store.writes.lock().unwrap().iter().sum::<usize>();
        while writer.lock().waiting.len() + writing() < 64 {
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        let results = all.await.unwrap();
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        for p in 0..64u32 {
            assert_eq!(store.inner.read_batches(p, 0, 1 << 20).unwrap().len(), 1);
        }
        // The blocking thread took what had queued when it started (one append, or more of
        // them), then, in one write, all that queued while that write was held.
        let writes = store.writes.lock().unwrap().clone();
        assert!(writes.len() <= 2, "{writes:?}");
        assert_eq!(writes.iter().sum::<usize>(), 64, "{writes:?}");
    }

    #[tokio::test]
    async fn a_small_append_is_written_on_the_calling_thread() {
        let store = Arc::new(Counting {
            here: Some(true),
            ..Counting::default()
        });
        let writer = Writer::new(store.clone());
        writer.append(vec![append(1, 0, 100)], false).await.unwrap();
        let here = store.here_writes.lock().unwrap().clone();
        assert_eq!(here, [(1, std::thread::current().id())]);
        assert!(store.writes.lock().unwrap().is_empty());
        // Large or durable appends go to a blocking thread.
        writer
            .append(vec![append(1, 1, HERE_BYTES + 1)], false)
            .await
            .unwrap();
        writer.append(vec![append(1, 2, 100)], true).await.unwrap();
        assert_eq!(*store.writes.lock().unwrap(), [1, 1]);
        assert_eq!(store.here_writes.lock().unwrap().len(), 1);
        assert_eq!(store.inner.read_batches(1, 0, 1 << 30).unwrap().len(), 3);
        stops_writing(&writer).await;
    }

    /// Waits until the blocking thread has stopped being the writer: it answers the last
    /// appends first, then finds nothing waiting, a moment after the answers.
    async fn stops_writing(writer: &Writer) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while writer.lock().writing {
            assert!(std::time::Instant::now() < deadline, "still the writer");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn an_append_the_store_would_stall_goes_to_a_blocking_thread() {
        for here in [None, Some(false)] {
            let store = Arc::new(Counting {
                here,
                ..Counting::default()
            });
            let writer = Writer::new(store.clone());
            writer.append(vec![append(1, 0, 100)], false).await.unwrap();
            assert_eq!(*store.writes.lock().unwrap(), [1]);
            assert!(store.here_writes.lock().unwrap().is_empty());
            assert_eq!(store.inner.read_batches(1, 0, 1 << 20).unwrap().len(), 1);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_that_queue_behind_a_write_on_the_calling_thread_are_written_next() {
        let (release, hold) = std::sync::mpsc::channel();
        let store = Arc::new(Counting {
            here: Some(true),
            hold_first: Mutex::new(Some(hold)),
            ..Counting::default()
        });
        let writer = Writer::new(store.clone());
        // Tasks of their own: the first holds its thread while it writes.
        let tasks: Vec<_> = (0..64u32)
            .map(|p| {
                let writer = writer.clone();
                tokio::spawn(async move { writer.append(vec![append(p, 0, 100)], false).await })
            })
            .collect();
        while store.here_writes.lock().unwrap().is_empty() || writer.lock().waiting.len() < 63 {
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        for p in 0..64u32 {
            assert_eq!(store.inner.read_batches(p, 0, 1 << 20).unwrap().len(), 1);
        }
        assert_eq!(store.here_writes.lock().unwrap().len(), 1);
        assert_eq!(*store.writes.lock().unwrap(), [63]);
        stops_writing(&writer).await;
    }

    #[test]
    fn a_group_stops_at_its_byte_bound_but_takes_one_oversized_append() {
        let w = |size| Waiting {
            appends: vec![append(1, 0, size)],
            durable: false,
            done: oneshot::channel().0,
        };
        assert_eq!(group_len(&[w(GROUP_BYTES + 1), w(1)]), 1);
        assert_eq!(
            group_len(&[w(GROUP_BYTES / 2), w(GROUP_BYTES / 2), w(1)]),
            2
        );
        assert_eq!(group_len(&[w(1), w(2), w(3)]), 3);
    }

    #[tokio::test]
    async fn a_failed_write_fails_its_appends_and_the_writer_goes_on() {
        let store = Arc::new(Counting {
            fail: true,
            ..Counting::default()
        });
        let writer = Writer::new(store.clone());
        for _ in 0..2 {
            let e = writer.append(vec![append(1, 0, 10)], false).await;
            assert!(
                matches!(e, Err(Error::Storage(ref m)) if m.contains("disk")),
                "{e:?}"
            );
        }
        assert_eq!(store.writes.lock().unwrap().len(), 2);
    }

    impl LogStore for Counting {
        fn append_now(&self, appends: &[Append]) -> Result<bool> {
            if self.here != Some(true) {
                return Ok(false);
            }
            self.here_writes
                .lock()
                .unwrap()
                .push((appends.len(), std::thread::current().id()));
            if let Some(hold) = self.hold_first.lock().unwrap().take() {
                hold.recv().unwrap();
            }
            self.inner.append(appends, false).map(|()| true)
        }
        fn append(&self, appends: &[Append], durable: bool) -> Result<()> {
            self.writes.lock().unwrap().push(appends.len());
            if let Some(hold) = self.hold_first.lock().unwrap().take() {
                hold.recv().unwrap();
            }
            if self.fail {
                return Err(Error::Storage("disk on fire".into()));
            }
            self.inner.append(appends, durable)
        }
        fn read_batches(&self, p: PartitionId, from: i64, max: usize) -> Result<Vec<Bytes>> {
            self.inner.read_batches(p, from, max)
        }
        fn scan_batches(
            &self,
            p: PartitionId,
            from: i64,
            f: &mut dyn FnMut(&BatchMeta) -> bool,
        ) -> Result<()> {
            self.inner.scan_batches(p, from, f)
        }
        fn last_batch(&self, p: PartitionId) -> Result<Option<BatchMeta>> {
            self.inner.last_batch(p)
        }
        fn truncate_prefix(&self, p: PartitionId, start: i64) -> Result<()> {
            self.inner.truncate_prefix(p, start)
        }
        fn truncate_suffix(
            &self,
            p: PartitionId,
            end: i64,
            producers: &[(i64, Option<Bytes>)],
        ) -> Result<()> {
            self.inner.truncate_suffix(p, end, producers)
        }
        fn log_start(&self, p: PartitionId) -> Result<Option<i64>> {
            self.inner.log_start(p)
        }
        fn replace_batches(
            &self,
            p: PartitionId,
            rewritten: &[(BatchMeta, Bytes)],
            removed: &[i64],
            unindexed: &[i64],
            cleaned_to: i64,
        ) -> Result<()> {
            self.inner
                .replace_batches(p, rewritten, removed, unindexed, cleaned_to)
        }
        fn cleaned_to(&self, p: PartitionId) -> Result<Option<i64>> {
            self.inner.cleaned_to(p)
        }
        fn delete_partition(&self, p: PartitionId) -> Result<()> {
            self.inner.delete_partition(p)
        }
        fn remove_producers(&self, p: PartitionId, producers: &[i64]) -> Result<()> {
            self.inner.remove_producers(p, producers)
        }
        fn producer_states(&self, p: PartitionId) -> Result<Vec<(i64, Bytes)>> {
            self.inner.producer_states(p)
        }
        fn epochs(&self, p: PartitionId) -> Result<Vec<(i32, i64)>> {
            self.inner.epochs(p)
        }
        fn aborted_txns(&self, p: PartitionId) -> Result<Vec<AbortedTxn>> {
            self.inner.aborted_txns(p)
        }
    }
}
