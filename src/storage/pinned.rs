//! Values RocksDB read, handed on as `Bytes` without a copy. A value read with a pinned get
//! is in a buffer RocksDB allocated for it (a blob it read, or a block of its cache); the
//! `Bytes` keep that buffer, and the database, alive until the last of them drops, which
//! for a fetch is once the response that references them is written.
//!
//! `unsafe_code` is allowed in this module only, to give the pinned value the database's
//! lifetime: its owner holds an `Arc` of the database it borrows from.
#![allow(unsafe_code)]

use std::sync::Arc;

use bytes::Bytes;
use rocksdb::{DBPinnableSlice, DB};

struct Pinned {
    // Declared before the database: fields drop in order, so the value goes first.
    value: DBPinnableSlice<'static>,
    _db: Arc<DB>,
}

impl AsRef<[u8]> for Pinned {
    fn as_ref(&self) -> &[u8] {
        &self.value
    }
}

/// `value`, read from `db`, as `Bytes` that keep it pinned.
pub fn pinned_bytes(db: &Arc<DB>, value: DBPinnableSlice<'_>) -> Bytes {
    // SAFETY: `value` borrows `db`, and only for as long as the database lives: the owner
    // holds a reference to the same database and drops it after the value.
    let value: DBPinnableSlice<'static> = unsafe { std::mem::transmute(value) };
    Bytes::from_owner(Pinned {
        value,
        _db: db.clone(),
    })
}
