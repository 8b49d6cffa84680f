//! Producer state per (partition, producer id), as Kafka's ProducerStateManager keeps it:
//! the producer epoch and the last five batches' sequence ranges and offsets, so a retried
//! batch is answered with its original offsets instead of being written twice; and, for a
//! transactional producer, where its open transaction starts in this partition and the
//! coordinator epoch of the last marker, so a fenced coordinator's marker is refused.
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    pub epoch: i16,
    pub batches: VecDeque<BatchSeq>,
    /// The first offset of this producer's open transaction in this partition.
    pub txn_first_offset: Option<i64>,
    /// The coordinator epoch of the last marker written for this producer (-1: none).
    pub coordinator_epoch: i32,
    /// The last transaction a marker closed: (first offset, marker offset). A follower that
    /// truncates the marker away reopens that transaction. Only the last is needed: a
    /// coordinator starts the next transaction only once the marker is committed (below the
    /// HW), and truncation never goes below the HW.
    pub last_txn: Option<(i64, i64)>,
    /// The max timestamp of the producer's last batch or marker here (Kafka's
    /// `lastTimestamp`): `producer.id.expiration.ms` counts from it. -1: unknown.
    pub last_timestamp: i64,
}

/// What a transaction marker did to a producer's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerApplied {
    /// The transaction it closed in this partition, if the producer wrote to it:
    /// (first offset, marker offset).
    pub closed: Option<(i64, i64)>,
}

/// Bytes the transactional fields add to an encoded state: a flags byte, the open
/// transaction's first offset, the coordinator epoch, and the last closed transaction.
const TXN_FIELDS_BYTES: usize = 1 + 8 + 4 + 16;

/// Bytes the last timestamp adds after the transactional fields (states written before
/// producer ids expired end without it).
const TIMESTAMP_BYTES: usize = 8;

/// What to do with a batch from an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    /// New data in sequence: append it.
    Append,
    /// A retry of a batch already in the log, at this base offset.
    Duplicate { base_offset: i64 },
}

impl ProducerState {
    pub fn new(epoch: i16) -> ProducerState {
        ProducerState {
            epoch,
            batches: VecDeque::new(),
            txn_first_offset: None,
            coordinator_epoch: -1,
            last_txn: None,
            last_timestamp: -1,
        }
    }

    /// Whether `producer.id.expiration.ms` has passed since this producer last wrote here
    /// with no transaction open (Kafka's `ProducerStateManager.isProducerExpired`).
    pub fn expired(&self, now_ms: i64, expiration_ms: i64) -> bool {
        self.txn_first_offset.is_none()
            && now_ms.saturating_sub(self.last_timestamp) >= expiration_ms
    }

    /// Checks a transaction marker for this producer against its state (Kafka's
    /// `ProducerAppendInfo.checkProducerEpoch` and `checkCoordinatorEpoch`): an older
    /// producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator epoch
    /// TRANSACTION_COORDINATOR_FENCED.
    pub fn check_marker(
        state: Option<&ProducerState>,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<()> {
        let Some(s) = state else { return Ok(()) };
        if producer_epoch < s.epoch {
            return Err(Error::InvalidProducerEpoch {
                got: producer_epoch,
                current: s.epoch,
            });
        }
        if coordinator_epoch < s.coordinator_epoch {
            return Err(Error::TransactionCoordinatorFenced {
                got: coordinator_epoch,
                current: s.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// The state after a marker at `marker_offset` (checked with [`Self::check_marker`]).
    pub fn after_marker(
        state: Option<&ProducerState>,
        producer_epoch: i16,
        coordinator_epoch: i32,
        marker_offset: i64,
        timestamp: i64,
    ) -> (ProducerState, MarkerApplied) {
        let mut next = match state {
            Some(s) if s.epoch == producer_epoch => s.clone(),
            // A marker with a newer epoch (a fenced producer, or transaction version 2's
            // bump per transaction) starts the sequence afresh, as a bumped epoch does.
            Some(s) => ProducerState {
                txn_first_offset: s.txn_first_offset,
                last_txn: s.last_txn,
                ..ProducerState::new(producer_epoch)
            },
            None => ProducerState::new(producer_epoch),
        };
        next.coordinator_epoch = coordinator_epoch;
        next.last_timestamp = timestamp;
        let closed = next
            .txn_first_offset
            .take()
            .map(|first| (first, marker_offset));
        if closed.is_some() {
            next.last_txn = closed;
        }
        (next, MarkerApplied { closed })
    }

    /// Cuts the state back to a log that ends before `end`: batches from there on are
    /// forgotten, a transaction that started there never happened, and one whose marker was
    /// there is open again. Returns whether anything changed.
    pub fn truncate(&mut self, end: i64) -> bool {
        let before = self.clone();
        self.batches.retain(|b| b.base_offset < end);
        if self.txn_first_offset.is_some_and(|f| f >= end) {
            self.txn_first_offset = None;
        }
        if let Some((first, marker)) = self.last_txn {
            if marker >= end {
                self.last_txn = None;
                if first < end {
                    self.txn_first_offset = Some(first);
                }
            }
        }
        *self != before
    }

    /// Checks a batch against this producer's state (None: no state known).
    pub fn check(state: Option<&ProducerState>, h: &BatchHeader) -> Result<SeqCheck> {
        let Some(s) = state else {
            // No state (a new producer, or its state was removed with the log): Kafka accepts
            // any sequence, since it cannot tell a gap from a fresh start. Not for a
            // transactional batch: its producer's first batch here is sequence 0, and a later
            // one whose partition was added to the transaction sooner (transaction version 2
            // adds it at the first Produce, which may wait on the last transaction's end) must
            // wait for it, as Kafka's verification state makes it; appended first, it would
            // leave the first refused for ever.
            if h.is_transactional() && h.base_sequence != 0 {
                return Err(Error::OutOfOrderSequence {
                    expected: 0,
                    got: h.base_sequence,
                });
            }
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
            // The epoch is known but nothing was written at it: a marker bumped it (transaction
            // version 2 ends every transaction so). Its first batch must be sequence 0, as in
            // Kafka; otherwise a later batch of the producer's next transaction, added to it
            // sooner than the first, would be appended ahead of it.
            None => 0,
        };
        if h.base_sequence != expected {
            return Err(Error::OutOfOrderSequence {
                expected,
                got: h.base_sequence,
            });
        }
        Ok(SeqCheck::Append)
    }

    /// The state after appending the data batch `h` at `base_offset`. A transactional
    /// batch opens the producer's transaction here if none is open.
    pub fn after_append(
        state: Option<&ProducerState>,
        h: &BatchHeader,
        base_offset: i64,
    ) -> ProducerState {
        let mut next = match state {
            Some(s) if s.epoch == h.producer_epoch => s.clone(),
            Some(s) => ProducerState {
                txn_first_offset: s.txn_first_offset,
                coordinator_epoch: s.coordinator_epoch,
                last_txn: s.last_txn,
                ..ProducerState::new(h.producer_epoch)
            },
            None => ProducerState::new(h.producer_epoch),
        };
        if h.is_transactional() && next.txn_first_offset.is_none() {
            next.txn_first_offset = Some(base_offset);
        }
        next.last_timestamp = h.max_timestamp;
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

    /// Encodes the state: epoch, batch count, the batches, then the transactional fields
    /// (states written before transactions existed end after the batches).
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(
            3 + self.batches.len() * 20 + TXN_FIELDS_BYTES + TIMESTAMP_BYTES,
        );
        b.put_i16(self.epoch);
        b.put_u8(self.batches.len() as u8);
        for s in &self.batches {
            b.put_i32(s.first_seq);
            b.put_i32(s.last_seq);
            b.put_i64(s.base_offset);
            b.put_i32(s.last_offset_delta);
        }
        b.put_u8(
            u8::from(self.txn_first_offset.is_some()) | u8::from(self.last_txn.is_some()) << 1,
        );
        b.put_i64(self.txn_first_offset.unwrap_or(-1));
        b.put_i32(self.coordinator_epoch);
        let (first, marker) = self.last_txn.unwrap_or((-1, -1));
        b.put_i64(first);
        b.put_i64(marker);
        b.put_i64(self.last_timestamp);
        b.freeze()
    }

    pub fn decode(v: &[u8]) -> Option<ProducerState> {
        let epoch = i16::from_be_bytes(v.get(0..2)?.try_into().ok()?);
        let n = *v.get(2)? as usize;
        let batches_end = 3 + n * 20;
        let with_txn = batches_end + TXN_FIELDS_BYTES;
        if n > DEDUP_BATCHES
            || ![batches_end, with_txn, with_txn + TIMESTAMP_BYTES].contains(&v.len())
        {
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
        let mut state = ProducerState {
            batches,
            ..ProducerState::new(epoch)
        };
        if let Some(t) = v.get(with_txn..) {
            if t.len() == TIMESTAMP_BYTES {
                state.last_timestamp = i64::from_be_bytes(t.try_into().ok()?);
            }
        }
        if let Some(t) = v.get(batches_end..) {
            if t.len() >= TXN_FIELDS_BYTES {
                let i64_at = |at: usize| t[at..at + 8].try_into().ok().map(i64::from_be_bytes);
                let flags = t[0];
                state.txn_first_offset = (flags & 1 != 0).then(|| i64_at(1)).flatten();
                state.coordinator_epoch = i32::from_be_bytes(t[9..13].try_into().ok()?);
                state.last_txn = match flags & 2 != 0 {
                    true => Some((i64_at(13)?, i64_at(21)?)),
                    false => None,
                };
            }
        }
        Some(state)
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

    /// Transaction version 2: the marker bumps the epoch, and the next transaction's
    /// batches at that epoch start at sequence 0. A later one arriving first (its
    /// partition added to the transaction sooner) must wait for it, as in Kafka, or it
    /// would be appended ahead of it and the first refused for ever.
    #[test]
    fn after_a_marker_bumps_the_epoch_the_sequence_starts_at_zero() {
        let h = header(4, 0, 100);
        let s = ProducerState::after_append(None, &h, 0);
        let (s, _) = ProducerState::after_marker(Some(&s), 5, 0, 100, 0);
        assert!(matches!(
            ProducerState::check(Some(&s), &header(5, 37, 37)),
            Err(Error::OutOfOrderSequence {
                expected: 0,
                got: 37
            })
        ));
        assert_eq!(
            ProducerState::check(Some(&s), &header(5, 0, 37)).unwrap(),
            SeqCheck::Append
        );
    }

    /// A producer's first transactional batch on a partition starts at sequence 0; a later
    /// one that arrives first waits (idempotent batches stay accepted at any sequence).
    #[test]
    fn a_new_producers_transactional_batches_start_at_zero() {
        let vals: Vec<&[u8]> = vec![&b"v"[..]; 3];
        let txn = |seq| {
            BatchHeader::parse(&crate::log::batch::tests::txn_batch(&vals, (1, 0, seq))).unwrap()
        };
        assert!(matches!(
            ProducerState::check(None, &txn(63)),
            Err(Error::OutOfOrderSequence {
                expected: 0,
                got: 63
            })
        ));
        assert_eq!(
            ProducerState::check(None, &txn(0)).unwrap(),
            SeqCheck::Append
        );
        assert_eq!(
            ProducerState::check(None, &header(0, 63, 3)).unwrap(),
            SeqCheck::Append
        );
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
        // States written before transactions existed have no transactional fields, and
        // those written before producer ids expired no last timestamp (-1: unknown).
        let unknown = ProducerState {
            last_timestamp: -1,
            ..s.clone()
        };
        let old = &s.encode()[..3 + DEDUP_BATCHES * 20];
        assert_eq!(ProducerState::decode(old).unwrap(), unknown);
        let old = &s.encode()[..3 + DEDUP_BATCHES * 20 + TXN_FIELDS_BYTES];
        assert_eq!(ProducerState::decode(old).unwrap(), unknown);
    }

    #[test]
    fn a_producer_expires_after_its_last_write_unless_a_transaction_is_open() {
        let s = ProducerState::after_append(None, &header(0, 0, 1), 0);
        let last = s.last_timestamp;
        assert!(!s.expired(last + 999, 1000));
        assert!(s.expired(last + 1000, 1000));
        let (s, _) = ProducerState::after_marker(Some(&s), 0, 0, 1, last + 5000);
        assert!(!s.expired(last + 5999, 1000), "a marker counts as a write");
        let open = ProducerState::after_append(None, &txn_header(0, 0), 10);
        assert!(!open.expired(i64::MAX, 1), "an open transaction keeps it");
    }

    fn txn_header(epoch: i16, seq: i32) -> BatchHeader {
        BatchHeader::parse(&crate::log::batch::tests::txn_batch(
            &[b"v"],
            (1, epoch, seq),
        ))
        .unwrap()
    }

    #[test]
    fn a_transaction_opens_with_its_first_batch_and_closes_with_its_marker() {
        let s = ProducerState::after_append(None, &txn_header(0, 0), 10);
        assert_eq!(s.txn_first_offset, Some(10));
        let s = ProducerState::after_append(Some(&s), &txn_header(0, 1), 12);
        assert_eq!(s.txn_first_offset, Some(10), "the first batch sets it");
        assert!(ProducerState::check_marker(Some(&s), 0, 3).is_ok());
        let (s, applied) = ProducerState::after_marker(Some(&s), 0, 3, 14, 0);
        assert_eq!(applied.closed, Some((10, 14)));
        assert_eq!(
            (s.txn_first_offset, s.last_txn, s.coordinator_epoch),
            (None, Some((10, 14)), 3)
        );
        assert_eq!(ProducerState::decode(&s.encode()).unwrap(), s);
        // A zombie coordinator and a fenced producer epoch are refused.
        assert!(matches!(
            ProducerState::check_marker(Some(&s), 0, 2),
            Err(Error::TransactionCoordinatorFenced { .. })
        ));
        assert!(matches!(
            ProducerState::check_marker(Some(&s), -1, 3),
            Err(Error::InvalidProducerEpoch { .. })
        ));
        // A marker for a producer with nothing open here closes nothing.
        let (again, applied) = ProducerState::after_marker(Some(&s), 1, 3, 15, 0);
        assert_eq!(
            (applied.closed, again.epoch, again.last_txn),
            (None, 1, Some((10, 14)))
        );

        // Truncating the marker away reopens the transaction; truncating its start forgets it.
        let mut cut = s.clone();
        assert!(cut.truncate(14));
        assert_eq!((cut.txn_first_offset, cut.last_txn), (Some(10), None));
        assert!(cut.truncate(10));
        assert_eq!(cut.txn_first_offset, None);
        assert!(cut.batches.is_empty());
        let mut unchanged = s.clone();
        assert!(!unchanged.truncate(20));
    }
}
