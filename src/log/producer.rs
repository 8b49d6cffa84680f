//! Idempotent producer state per (partition, producer id), as Kafka's ProducerStateManager
//! keeps it: the producer epoch and the last five batches' sequence ranges and offsets, so a
//! retried batch is answered with its original offsets instead of being written twice.
//!
//! The state is written in the same storage write as the batch that changed it.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};

use super::batch::BatchHeader;
use crate::error::{Error, Result};

/// How many recent batches per producer are remembered for duplicate detection; the Java
/// client keeps at most five requests in flight for idempotence, so five suffice.
pub const DEDUP_BATCHES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSeq {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset_delta: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerState {
    pub epoch: i16,
    pub batches: VecDeque<BatchSeq>,
}

/// What to do with a batch from an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    /// New data in sequence: append it.
    Append,
    /// A retry of a batch already in the log, at this base offset.
    Duplicate { base_offset: i64 },
}

impl ProducerState {
    /// Checks a batch against this producer's state (None: no state known).
    pub fn check(state: Option<&ProducerState>, h: &BatchHeader) -> Result<SeqCheck> {
        let Some(s) = state else {
            // No state (a new producer, or its state was removed with the log): Kafka accepts
            // any sequence, since it cannot tell a gap from a fresh start.
            return Ok(SeqCheck::Append);
        };
        if h.producer_epoch < s.epoch {
            return Err(Error::InvalidProducerEpoch {
                got: h.producer_epoch,
                current: s.epoch,
            });
        }
        if h.producer_epoch > s.epoch {
            return if h.base_sequence == 0 {
                Ok(SeqCheck::Append)
            } else {
                Err(Error::OutOfOrderSequence {
                    expected: 0,
                    got: h.base_sequence,
                })
            };
        }
        let last_seq = h.last_sequence();
        if let Some(dup) = s
            .batches
            .iter()
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq)
        {
            return Ok(SeqCheck::Duplicate {
                base_offset: dup.base_offset,
            });
        }
        let expected = match s.batches.back() {
            Some(b) => next_seq(b.last_seq),
            None => h.base_sequence,
        };
        if h.base_sequence != expected {
            return Err(Error::OutOfOrderSequence {
                expected,
                got: h.base_sequence,
            });
        }
        Ok(SeqCheck::Append)
    }

    /// The state after appending `h` at `base_offset`.
    pub fn after_append(
        state: Option<&ProducerState>,
        h: &BatchHeader,
        base_offset: i64,
    ) -> ProducerState {
        let mut next = match state {
            Some(s) if s.epoch == h.producer_epoch => s.clone(),
            _ => ProducerState {
                epoch: h.producer_epoch,
                batches: VecDeque::new(),
            },
        };
        if next.batches.len() == DEDUP_BATCHES {
            next.batches.pop_front();
        }
        next.batches.push_back(BatchSeq {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset,
            last_offset_delta: h.last_offset_delta,
        });
        next
    }

    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(3 + self.batches.len() * 20);
        b.put_i16(self.epoch);
        b.put_u8(self.batches.len() as u8);
        for s in &self.batches {
            b.put_i32(s.first_seq);
            b.put_i32(s.last_seq);
            b.put_i64(s.base_offset);
            b.put_i32(s.last_offset_delta);
        }
        b.freeze()
    }

    pub fn decode(v: &[u8]) -> Option<ProducerState> {
        let epoch = i16::from_be_bytes(v.get(0..2)?.try_into().ok()?);
        let n = *v.get(2)? as usize;
        if n > DEDUP_BATCHES || v.len() != 3 + n * 20 {
            return None;
        }
        let mut batches = VecDeque::with_capacity(n);
        for i in 0..n {
            let r = &v[3 + i * 20..3 + (i + 1) * 20];
            batches.push_back(BatchSeq {
                first_seq: i32::from_be_bytes(r[0..4].try_into().ok()?),
                last_seq: i32::from_be_bytes(r[4..8].try_into().ok()?),
                base_offset: i64::from_be_bytes(r[8..16].try_into().ok()?),
                last_offset_delta: i32::from_be_bytes(r[16..20].try_into().ok()?),
            });
        }
        Some(ProducerState { epoch, batches })
    }
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::tests::batch;

    fn header(epoch: i16, seq: i32, n: usize) -> BatchHeader {
        let vals: Vec<&[u8]> = (0..n).map(|_| &b"v"[..]).collect();
        BatchHeader::parse(&batch(&vals, Some((1, epoch, seq)), 0)).unwrap()
    }

    #[test]
    fn in_order_duplicates_and_gaps() {
        let h0 = header(0, 0, 3);
        assert_eq!(ProducerState::check(None, &h0).unwrap(), SeqCheck::Append);
        let s = ProducerState::after_append(None, &h0, 100);
        let h1 = header(0, 3, 2);
        assert_eq!(
            ProducerState::check(Some(&s), &h1).unwrap(),
            SeqCheck::Append
        );
        let s = ProducerState::after_append(Some(&s), &h1, 103);
        assert_eq!(
            ProducerState::check(Some(&s), &h0).unwrap(),
            SeqCheck::Duplicate { base_offset: 100 }
        );
        let gap = header(0, 9, 1);
        assert!(matches!(
            ProducerState::check(Some(&s), &gap),
            Err(Error::OutOfOrderSequence {
                expected: 5,
                got: 9
            })
        ));
        let old = header(-1, 5, 1);
        assert!(matches!(
            ProducerState::check(Some(&s), &old),
            Err(Error::InvalidProducerEpoch { .. })
        ));
        let bumped_bad = header(1, 5, 1);
        assert!(ProducerState::check(Some(&s), &bumped_bad).is_err());
        let bumped = header(1, 0, 1);
        assert_eq!(
            ProducerState::check(Some(&s), &bumped).unwrap(),
            SeqCheck::Append
        );
        let s2 = ProducerState::after_append(Some(&s), &bumped, 105);
        assert_eq!(s2.epoch, 1);
        assert_eq!(s2.batches.len(), 1);
    }

    #[test]
    fn window_keeps_five_and_round_trips() {
        let mut s: Option<ProducerState> = None;
        for i in 0..7 {
            let h = header(0, i, 1);
            s = Some(ProducerState::after_append(s.as_ref(), &h, i as i64));
        }
        let s = s.unwrap();
        assert_eq!(s.batches.len(), DEDUP_BATCHES);
        assert_eq!(s.batches.front().unwrap().first_seq, 2);
        assert_eq!(ProducerState::decode(&s.encode()).unwrap(), s);
        assert!(ProducerState::decode(b"\x00").is_none());
    }
}
