//! The broker's budget for fetched records in memory (`fetch.memory.max.bytes`).
//!
//! Kafka sends a fetch's records from its log files with sendfile and never holds them.
//! Cairn reads them from RocksDB into memory and holds them until the response has been
//! written to its socket, so many maximal fetches at once would hold `fetch.max.bytes`
//! each. A fetch is granted only what is left of the budget (Fetch, ShareFetch, followers'
//! fetches alike), and the records it read count against the budget until every copy of
//! them is dropped, which is when the writer has sent them. A fetch granted nothing still
//! returns its first batch (KIP-74), so every fetcher progresses and the budget is
//! exceeded by at most one batch per fetch in flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

pub struct FetchMemory {
    limit: usize,
    held: Arc<AtomicUsize>,
}

/// Bytes reserved for a fetch about to read, given back when dropped (the records it read
/// are held by then).
pub struct Grant {
    pub bytes: usize,
    held: Arc<AtomicUsize>,
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Records counted against the budget while any copy of them lives.
struct Held {
    records: Bytes,
    held: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.records
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.held.fetch_sub(self.records.len(), Ordering::Relaxed);
    }
}

impl FetchMemory {
    pub fn new(limit: usize) -> FetchMemory {
        FetchMemory {
            limit,
            held: Arc::default(),
        }
    }

    /// Reserves what is left of the budget, up to `want`: 0 when it is all held.
    pub fn grant(&self, want: usize) -> Grant {
        let mut bytes = 0;
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                bytes = want.min(self.limit.saturating_sub(held));
                Some(held + bytes)
            });
        Grant {
            bytes,
            held: self.held.clone(),
        }
    }

    /// `records`, counted against the budget until the last copy of them is dropped.
    pub fn hold(&self, records: Bytes) -> Bytes {
        if records.is_empty() {
            return records;
        }
        self.held.fetch_add(records.len(), Ordering::Relaxed);
        Bytes::from_owner(Held {
            records,
            held: self.held.clone(),
        })
    }

    /// Bytes of fetched records held, and reserved by fetches reading, now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_what_is_left_and_holds_records_until_their_last_copy_drops() {
        let m = FetchMemory::new(100);
        let g = m.grant(60);
        assert_eq!(g.bytes, 60);
        assert_eq!(m.grant(60).bytes, 40, "only what is left");
        assert_eq!(m.held(), 60, "a dropped grant is given back");
        let records = m.hold(Bytes::from(vec![7u8; 30]));
        drop(g);
        assert_eq!(m.held(), 30);
        assert_eq!(m.grant(100).bytes, 70);
        let piece = records.slice(10..20);
        drop(records);
        assert_eq!(m.held(), 30, "a slice is a copy still alive");
        assert_eq!(&piece[..], &[7u8; 10]);
        drop(piece);
        assert_eq!(m.held(), 0);
        assert_eq!(m.hold(Bytes::new()).len(), 0);
        assert_eq!(m.held(), 0);

        let _all = m.hold(Bytes::from(vec![0u8; 150]));
        assert_eq!(m.grant(10).bytes, 0, "over the budget: nothing granted");
    }
}
