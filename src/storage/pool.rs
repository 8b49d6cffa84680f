//! Read buffers handed out as `Bytes` and taken back when the last reference to them drops
//! (once the response that carries them is written). A backlog read fills a new buffer of up
//! to a megabyte per partition per fetch; new memory is memory the kernel faults in and zeroes
//! page by page, a tenth of a consumer's read cost in `perf` until buffers were reused.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// Buffers larger than this are not kept.
const BUFFER_BYTES_MAX: usize = 8 << 20;
/// Nor more than this in all.
const POOL_BYTES_MAX: usize = 64 << 20;

#[derive(Default)]
pub struct BufferPool {
    free: Mutex<Free>,
}

#[derive(Default)]
struct Free {
    buffers: Vec<Vec<u8>>,
    bytes: usize,
}

impl BufferPool {
    pub fn new() -> Arc<BufferPool> {
        Arc::new(BufferPool::default())
    }

    /// An empty buffer with room for `capacity` bytes: a kept one when one is big enough.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        let found = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let at = free.buffers.iter().rposition(|b| b.capacity() >= capacity);
            at.map(|i| {
                let b = free.buffers.swap_remove(i);
                free.bytes -= b.capacity();
                b
            })
        };
        found.unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// `buf` as `Bytes` that give it back to the pool when the last of them drops.
    pub fn freeze(self: &Arc<Self>, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Pooled {
            buf,
            pool: self.clone(),
        })
    }

    fn give(&self, mut buf: Vec<u8>) {
        if buf.capacity() > BUFFER_BYTES_MAX {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.bytes + buf.capacity() <= POOL_BYTES_MAX {
            buf.clear();
            free.bytes += buf.capacity();
            free.buffers.push(buf);
        }
    }

    #[cfg(test)]
    fn kept(&self) -> (usize, usize) {
        let free = self.free.lock().unwrap();
        (free.buffers.len(), free.bytes)
    }
}

struct Pooled {
    buf: Vec<u8>,
    pool: Arc<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_returns_when_its_last_bytes_drop_and_is_reused() {
        let pool = BufferPool::new();
        let mut buf = pool.take(1000);
        buf.extend_from_slice(b"hello world");
        let addr = buf.as_ptr();
        let whole = pool.freeze(buf);
        let part = whole.slice(6..);
        drop(whole);
        assert_eq!(pool.kept().0, 0, "a slice still holds it");
        assert_eq!(&part[..], b"world");
        drop(part);
        assert_eq!(pool.kept().0, 1);
        let again = pool.take(500);
        assert_eq!((again.as_ptr(), again.len()), (addr, 0));
        // Too small for this request: a new buffer, the kept one stays.
        let mut other = pool.take(4000);
        other.push(1);
        assert_eq!(pool.kept(), (0, 0));
        drop(pool.freeze(again));
        drop(pool.freeze(other));
        assert_eq!(pool.kept().0, 2);
    }

    #[test]
    fn huge_buffers_and_a_full_pool_are_not_kept() {
        let pool = BufferPool::new();
        drop(pool.freeze(Vec::with_capacity(BUFFER_BYTES_MAX + 1)));
        assert_eq!(pool.kept().0, 0);
        for _ in 0..(POOL_BYTES_MAX / BUFFER_BYTES_MAX + 2) {
            drop(pool.freeze(Vec::with_capacity(BUFFER_BYTES_MAX)));
        }
        assert!(pool.kept().1 <= POOL_BYTES_MAX);
    }
}
