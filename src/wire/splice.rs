//! Response frames whose large byte fields are not copied: a Fetch response's record sets
//! are the `Bytes` the log read, and [`spliced_response_frame`] puts them into the frame as
//! pieces of their own instead of copying them into the encode buffer. The frame is then a
//! list of pieces ([`Pieces`]) that the connection writes with one vectored write.
//!
//! kafka-protocol's encoder writes a byte field with `put_slice(&field[..])`; the buffer here
//! recognises a slice that is exactly one of the `Bytes` it was given (same address, same
//! length) and keeps a reference to it. Anything else is copied as usual, so the bytes of the
//! frame are exactly kafka-protocol's, by construction (and checked by a test).
//!
//! `unsafe_code` is allowed in this module only, for `BufMut`, an unsafe trait: every method
//! forwards to `BytesMut`'s own. What it buys, measured: a consumer reading a backlog costs one
//! copy less per byte (docs/BENCHMARKS.md).
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io::IoSlice;
use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::Encodable;

use super::{response_frame_into, WireError};

/// Fields shorter than this are copied: a piece of its own costs more than the copy.
const SPLICE_MIN_BYTES: usize = 4096;

/// A frame in pieces, written in order.
#[derive(Debug, Default, Clone)]
pub struct Pieces {
    parts: VecDeque<Bytes>,
    remaining: usize,
}

impl Pieces {
    pub fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.remaining += b.len();
            self.parts.push_back(b);
        }
    }

    /// The pieces joined (tests, and callers that need one buffer).
    pub fn concat(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.remaining);
        for p in &self.parts {
            out.extend_from_slice(p);
        }
        out.freeze()
    }
}

impl From<Bytes> for Pieces {
    fn from(b: Bytes) -> Self {
        let mut p = Pieces::default();
        p.push(b);
        p
    }
}

impl Buf for Pieces {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |b| &b[..])
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, part) in dst.iter_mut().zip(&self.parts) {
            *slot = IoSlice::new(part);
            n += 1;
        }
        n
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "advance past the end of a frame");
        self.remaining -= cnt;
        while cnt > 0 {
            let front = self.parts.front_mut().expect("remaining counts the parts");
            if cnt < front.len() {
                front.advance(cnt);
                return;
            }
            cnt -= front.len();
            self.parts.pop_front();
        }
    }
}

/// The encode buffer: bytes are written into `cur`; a slice that is one of `splice` ends
/// `cur` and becomes a piece of its own.
struct SpliceBuf {
    done: Pieces,
    cur: BytesMut,
    splice: Vec<Bytes>,
}

impl SpliceBuf {
    fn finish(mut self) -> Pieces {
        let tail = self.cur.split().freeze();
        self.done.push(tail);
        self.done
    }
}

// SAFETY: every method forwards to the one `BytesMut` that receives the copied bytes, whose
// implementation upholds the trait's contract; `put_slice` only adds pieces beside it.
unsafe impl BufMut for SpliceBuf {
    fn remaining_mut(&self) -> usize {
        self.cur.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's promise about `cnt` is about `chunk_mut`, which is `cur`'s.
        unsafe { self.cur.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.cur.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= SPLICE_MIN_BYTES {
            let same = |b: &Bytes| b.as_ptr() == src.as_ptr() && b.len() == src.len();
            if let Some(i) = self.splice.iter().position(same) {
                let whole = self.splice.swap_remove(i);
                let head = self.cur.split().freeze();
                self.done.push(head);
                self.done.push(whole);
                return;
            }
        }
        self.cur.extend_from_slice(src);
    }
}

impl ByteBufMut for SpliceBuf {
    fn offset(&self) -> usize {
        self.done.remaining + self.cur.len()
    }

    /// Gaps (written later, by offset) only ever fall in the bytes not yet split off: the
    /// encoders that use them (record batches) write no spliced field inside a gap.
    fn seek(&mut self, offset: usize) {
        let at = offset
            .checked_sub(self.done.remaining)
            .expect("seek before a spliced piece");
        self.cur.resize(at, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        let base = self.done.remaining;
        assert!(r.start >= base, "range before a spliced piece");
        &mut self.cur[r.start - base..r.end - base]
    }
}

/// A response frame (length prefix, header, body) in pieces: every field of `body` that is
/// one of `large` is referenced, not copied.
pub fn spliced_response_frame<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
    large: Vec<Bytes>,
) -> Result<Pieces, WireError> {
    let large: Vec<Bytes> = large
        .into_iter()
        .filter(|b| b.len() >= SPLICE_MIN_BYTES)
        .collect();
    let spliced: usize = large.iter().map(Bytes::len).sum();
    let buf = response_frame_into(api, version, correlation_id, body, |size| SpliceBuf {
        done: Pieces::default(),
        cur: BytesMut::with_capacity(4 + size.saturating_sub(spliced)),
        splice: large,
    })?;
    Ok(buf.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::response_frame;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::FetchResponse;

    fn fetch_response(records: &[Bytes]) -> FetchResponse {
        let partitions = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                PartitionData::default()
                    .with_partition_index(i as i32)
                    .with_high_watermark(100 + i as i64)
                    .with_records(Some(r.clone()))
            })
            .collect();
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(crate::wire::topic_name("t"))
            .with_partitions(partitions)])
    }

    #[test]
    fn spliced_frames_are_kafka_protocols_bytes() {
        let records: Vec<Bytes> = [10usize, 5000, 0, 70_000, 4096]
            .iter()
            .enumerate()
            .map(|(i, n)| Bytes::from(vec![i as u8 + 1; *n]))
            .collect();
        let resp = fetch_response(&records);
        for version in [4, 11, 12, 13, 16, 17] {
            let whole = response_frame(ApiKey::Fetch, version, 9, &resp).unwrap();
            let pieces =
                spliced_response_frame(ApiKey::Fetch, version, 9, &resp, records.clone()).unwrap();
            assert_eq!(pieces.concat(), whole, "v{version}");
            // The three large record sets are pieces of their own, the same memory.
            let shared = pieces
                .parts
                .iter()
                .filter(|p| {
                    records
                        .iter()
                        .any(|r| r.len() >= 4096 && r.as_ptr() == p.as_ptr())
                })
                .count();
            assert_eq!(shared, 3, "v{version}");
        }
    }

    #[test]
    fn pieces_advance_across_parts_and_fill_io_slices() {
        let mut p = Pieces::default();
        for s in [&b"abc"[..], b"", b"defg", b"h"] {
            p.push(Bytes::copy_from_slice(s));
        }
        assert_eq!(p.remaining(), 8);
        let mut slices = [IoSlice::new(&[]); 8];
        assert_eq!(p.chunks_vectored(&mut slices), 3);
        p.advance(4);
        assert_eq!(p.chunk(), b"efg");
        p.advance(3);
        assert_eq!((p.remaining(), p.chunk()), (1, &b"h"[..]));
        p.advance(1);
        assert_eq!((p.remaining(), p.chunk()), (0, &b""[..]));
    }
}
