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

/// A field's value as the response holds it, and the pieces that go into the frame for it.
type Splice = (Bytes, Vec<Bytes>);

/// The encode buffer: bytes are written into `cur`; a slice that is the value of one of
/// `splice` ends `cur`, and that entry's pieces follow it.
struct SpliceBuf {
    done: Pieces,
    cur: BytesMut,
    splice: Vec<Splice>,
    /// The length of a stand-in written that none of `splice` replaces.
    unspliced: Option<usize>,
}

impl SpliceBuf {
    /// The frame; an error if it holds a stand-in's zeros in place of records. (Sets the
    /// response does not carry, such as those of a fetch answered with a throttle only,
    /// are dropped.)
    fn finish(mut self, api: ApiKey, version: i16) -> Result<Pieces, WireError> {
        if let Some(len) = self.unspliced {
            return Err(WireError::Encode {
                api,
                version,
                reason: format!("a record set of {len} bytes was not spliced in"),
            });
        }
        let tail = self.cur.split().freeze();
        self.done.push(tail);
        Ok(self.done)
    }
}

/// The stand-ins' address range.
const STAND_IN_SPAN: usize = 128 << 20;

/// Zeroed memory that is never written, so never resident: a block this large is mapped
/// from the kernel untouched (`crate::allocator`). Not a `static` array, which would be
/// 128 MiB of zeros in the binary's read-only data.
fn stand_ins() -> &'static [u8] {
    static RANGE: std::sync::OnceLock<&'static [u8]> = std::sync::OnceLock::new();
    RANGE.get_or_init(|| Vec::leak(vec![0; STAND_IN_SPAN]))
}

fn is_stand_in(b: &[u8]) -> bool {
    stand_ins().as_ptr_range().contains(&b.as_ptr())
}

/// The record sets of one response that are in several pieces (a Fetch partition's
/// batches as the store and the tail cache hold them). The response carries a stand-in for
/// each: bytes of the set's length at an address of their own, which the encoder knows
/// again and replaces with the pieces. The stand-ins' bytes are zeros; a response whose
/// stand-ins are not all replaced is not sent.
#[derive(Default)]
pub struct RecordSets {
    sets: std::sync::Mutex<Vec<Splice>>,
}

impl RecordSets {
    /// The value of a response field for the bytes of `pieces`, one after the other: the
    /// piece itself when there is one, a stand-in when there are several (their bytes
    /// joined when small, or when the stand-ins' range is spent).
    pub fn value_for(&self, mut pieces: Vec<Bytes>) -> Bytes {
        let len: usize = pieces.iter().map(Bytes::len).sum();
        if pieces.len() <= 1 {
            return pieces.pop().unwrap_or_default();
        }
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        // Unique within the response: each stand-in starts one byte after the last one's
        // start, and the lengths may be equal.
        let at = sets.len();
        if len < SPLICE_MIN_BYTES || at + len > STAND_IN_SPAN {
            return Pieces::from_iter(pieces).concat();
        }
        let stand_in = Bytes::from_static(&stand_ins()[at..at + len]);
        sets.push((stand_in.clone(), pieces));
        stand_in
    }

    fn take(&self) -> Vec<Splice> {
        std::mem::take(&mut *self.sets.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl FromIterator<Bytes> for Pieces {
    fn from_iter<I: IntoIterator<Item = Bytes>>(iter: I) -> Self {
        let mut p = Pieces::default();
        for b in iter {
            p.push(b);
        }
        p
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
            let same = |(b, _): &Splice| b.as_ptr() == src.as_ptr() && b.len() == src.len();
            if let Some(i) = self.splice.iter().position(same) {
                let (_, pieces) = self.splice.swap_remove(i);
                let head = self.cur.split().freeze();
                self.done.push(head);
                for p in pieces {
                    self.done.push(p);
                }
                return;
            }
            if is_stand_in(src) {
                self.unspliced = Some(src.len());
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
/// one of `large` is referenced, not copied, and every stand-in of `sets` is replaced with
/// its pieces.
pub fn spliced_response_frame<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
    large: Vec<Bytes>,
    sets: &RecordSets,
) -> Result<Pieces, WireError> {
    let mut splice: Vec<Splice> = large
        .into_iter()
        .filter(|b| b.len() >= SPLICE_MIN_BYTES && !is_stand_in(b))
        .map(|b| (b.clone(), vec![b]))
        .collect();
    splice.extend(sets.take());
    let spliced: usize = splice.iter().map(|(b, _)| b.len()).sum();
    let buf = response_frame_into(api, version, correlation_id, body, |size| SpliceBuf {
        done: Pieces::default(),
        cur: BytesMut::with_capacity(4 + size.saturating_sub(spliced)),
        splice,
        unspliced: None,
    })?;
    buf.finish(api, version)
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
            let pieces = spliced_response_frame(
                ApiKey::Fetch,
                version,
                9,
                &resp,
                records.clone(),
                &RecordSets::default(),
            )
            .unwrap();
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

    /// Record sets in pieces go out as the same bytes as joined ones, each piece the same
    /// memory; small ones are joined, and one piece is its own value.
    #[test]
    fn record_sets_in_pieces_are_spliced_as_their_bytes() {
        let piece = |n: usize, b: u8| Bytes::from(vec![b; n]);
        let shapes: Vec<Vec<Bytes>> = vec![
            vec![piece(5000, 1), piece(3000, 2), piece(70_000, 3)],
            vec![piece(10, 4), piece(20, 5)],
            vec![piece(8000, 6)],
            vec![piece(4096, 7), piece(4096, 8)],
            vec![piece(4096, 9), piece(4096, 10)],
        ];
        for version in [4, 11, 12, 13, 16, 17] {
            let sets = RecordSets::default();
            let values: Vec<Bytes> = shapes.iter().map(|p| sets.value_for(p.clone())).collect();
            let joined: Vec<Bytes> = shapes.iter().map(|p| p.concat().into()).collect();
            assert_eq!(
                values.iter().filter(|v| is_stand_in(v)).count(),
                3,
                "the three large sets of several pieces"
            );
            let whole =
                response_frame(ApiKey::Fetch, version, 9, &fetch_response(&joined)).unwrap();
            let resp = fetch_response(&values);
            let pieces =
                spliced_response_frame(ApiKey::Fetch, version, 9, &resp, values.clone(), &sets)
                    .unwrap();
            assert_eq!(pieces.concat(), whole, "v{version}");
            let shared = pieces
                .parts
                .iter()
                .filter(|p| shapes.iter().flatten().any(|s| s.as_ptr() == p.as_ptr()))
                .count();
            assert_eq!(shared, 3 + 1 + 2 + 2, "v{version}");
        }
    }

    /// A stand-in the sets do not replace is an error, not zeros sent as records; sets the
    /// response does not carry (a fetch answered with a throttle only) are dropped.
    #[test]
    fn a_stand_in_not_spliced_is_an_error_and_sets_not_carried_are_dropped() {
        let two = || vec![Bytes::from(vec![1; 5000]), Bytes::from(vec![2; 5000])];
        let sets = RecordSets::default();
        let value = sets.value_for(two());
        assert!(is_stand_in(&value));
        let resp = fetch_response(&[value]);
        let err =
            spliced_response_frame(ApiKey::Fetch, 17, 9, &resp, vec![], &RecordSets::default())
                .unwrap_err();
        assert!(err.to_string().contains("not spliced"), "{err}");

        let sets = RecordSets::default();
        assert!(is_stand_in(&sets.value_for(two())));
        let throttled = FetchResponse::default().with_throttle_time_ms(500);
        let pieces =
            spliced_response_frame(ApiKey::Fetch, 17, 9, &throttled, vec![], &sets).unwrap();
        assert_eq!(
            pieces.concat(),
            response_frame(ApiKey::Fetch, 17, 9, &throttled).unwrap()
        );
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
