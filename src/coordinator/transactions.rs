//! The transaction coordinator's state machine (Kafka's `TransactionMetadata` and the
//! decisions of `TransactionCoordinator`), without I/O: each request takes the current
//! metadata of one transactional id and returns either an error to answer or a
//! [`Transition`], the metadata to write to `__transaction_state` before the change counts
//! (Kafka appends every transition with acks=all before it answers). While a transition is
//! being written the id is *pending* and every other request for it gets
//! CONCURRENT_TRANSACTIONS, as Kafka's `pendingState` does.
//!
//! States and ids are Kafka's: Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
//! CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7.
//!
//! - InitProducerId: a new id gets a producer id at epoch 0; a finished one a bumped epoch
//!   (a new producer id once the epoch is exhausted); an ongoing one is fenced (epoch + 1,
//!   aborted) and the caller retries; KIP-360 callers name the producer id and epoch they
//!   had, so a retry gets the same answer and a zombie gets PRODUCER_FENCED.
//! - AddPartitionsToTxn / AddOffsetsToTxn: Empty or Complete* -> Ongoing, partitions added.
//! - EndTxn: Ongoing -> PrepareCommit/PrepareAbort (the reply goes out once that is
//!   written); markers then go to every partition, and once all are written,
//!   PrepareX -> CompleteX. With transaction version 2 (KIP-890 part 2) the epoch is bumped
//!   at prepare and returned to the client, and an abort from Empty is allowed.
//! - A transaction older than its timeout is fenced and aborted by the coordinator.

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::ResponseError;

/// A transaction's state, with Kafka's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnState {
    Empty = 0,
    Ongoing = 1,
    PrepareCommit = 2,
    PrepareAbort = 3,
    CompleteCommit = 4,
    CompleteAbort = 5,
    Dead = 6,
    PrepareEpochFence = 7,
}

impl TxnState {
    pub fn from_id(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// The name Kafka's DescribeTransactions and ListTransactions answer with.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// Whether a new transaction may start (no transaction in flight).
    fn is_idle(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// A partition in a transaction.
pub type TxnPartition = (String, i32);

/// What the coordinator keeps per transactional id (one record of `__transaction_state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last epoch exhaustion (-1: none), so a KIP-360 retry that
    /// names it still gets the current one.
    pub prev_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump (-1: none): a retried InitProducerId or (TV2) EndTxn
    /// names it.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TxnPartition>,
    /// When the current transaction started (-1: none).
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// Whether the current transaction runs transaction version 2 (epoch bump per
    /// transaction, markers carry the bumped epoch).
    pub tv2: bool,
}

/// The epoch past which a producer id is exhausted and a new one is handed out (Kafka:
/// `Short.MAX_VALUE - 1`, keeping one bump for fencing).
pub const EPOCH_MAX: i16 = i16::MAX - 1;

/// A change to write to `__transaction_state` before it takes effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub next: TxnMetadata,
    /// What happens once it is written.
    pub then: Then,
}

/// What the shell does after a transition is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Then {
    /// Answer the client with the new producer id and epoch.
    ReplyProducer,
    /// Answer the client without data.
    Reply,
    /// Answer the client (the new producer id and epoch for TV2), then write markers to
    /// `partitions` and complete the transaction.
    ReplyAndMark,
    /// Answer the client with CONCURRENT_TRANSACTIONS (it retries), then write ABORT
    /// markers and complete: an ongoing transaction was fenced by InitProducerId.
    RetryAndAbort,
    /// Nobody waits: write ABORT markers and complete (a timed-out transaction).
    Abort,
}

/// An InitProducerId request for a transactional id.
#[derive(Debug, Clone, Copy)]
pub struct InitRequest {
    pub timeout_ms: i32,
    /// KIP-360 (v3+): the producer id and epoch the client had, when it had one.
    pub expected: Option<(i64, i16)>,
    pub now_ms: i64,
}

/// What InitProducerId decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitDecision {
    /// A retry of the last bump: answer the current producer id and epoch, nothing to write.
    Current {
        producer_id: i64,
        epoch: i16,
    },
    Write(Transition),
}

fn checked_timeout(timeout_ms: i32, max_ms: i32) -> Result<(), ResponseError> {
    if timeout_ms <= 0 || timeout_ms > max_ms {
        return Err(ResponseError::InvalidTransactionTimeout);
    }
    Ok(())
}

impl TxnMetadata {
    pub fn new(id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMetadata {
        TxnMetadata {
            transactional_id: id.to_string(),
            producer_id,
            prev_producer_id: -1,
            producer_epoch: 0,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            tv2: false,
        }
    }

    /// The same transaction one epoch on, or under a new producer id at epoch 0 when the
    /// epoch is exhausted.
    fn bumped(&self, new_producer_id: &mut dyn FnMut() -> i64) -> TxnMetadata {
        let mut next = self.clone();
        if self.producer_epoch >= EPOCH_MAX {
            next.prev_producer_id = self.producer_id;
            next.producer_id = new_producer_id();
            next.producer_epoch = 0;
            next.last_producer_epoch = -1;
        } else {
            next.producer_epoch = self.producer_epoch + 1;
            next.last_producer_epoch = self.producer_epoch;
        }
        next
    }

    /// Checks the producer id and epoch a request names against this id's: the wrong id is
    /// INVALID_PRODUCER_ID_MAPPING, an older epoch PRODUCER_FENCED (handlers map it to
    /// INVALID_PRODUCER_EPOCH for old versions).
    pub fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), ResponseError> {
        if producer_id != self.producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if epoch != self.producer_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        Ok(())
    }

    /// Whether `partition` is in the ongoing transaction (KIP-890 verification).
    pub fn verify(
        &self,
        producer_id: i64,
        epoch: i16,
        partition: &TxnPartition,
    ) -> Result<(), ResponseError> {
        self.check_producer(producer_id, epoch)?;
        match self.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Err(ResponseError::ConcurrentTransactions)
            }
            TxnState::Ongoing if self.partitions.contains(partition) => Ok(()),
            _ => Err(ResponseError::TransactionAbortable),
        }
    }
}

/// InitProducerId for a transactional id whose metadata is `current` (None: unknown).
pub fn init_producer_id(
    id: &str,
    current: Option<&TxnMetadata>,
    req: InitRequest,
    timeout_max_ms: i32,
    new_producer_id: &mut dyn FnMut() -> i64,
) -> Result<InitDecision, ResponseError> {
    checked_timeout(req.timeout_ms, timeout_max_ms)?;
    let Some(cur) = current.filter(|c| c.state != TxnState::Dead) else {
        let next = TxnMetadata::new(id, new_producer_id(), req.timeout_ms, req.now_ms);
        return Ok(InitDecision::Write(Transition {
            next,
            then: Then::ReplyProducer,
        }));
    };
    if let Some((pid, epoch)) = req.expected.filter(|(pid, _)| *pid >= 0) {
        let known = pid == cur.producer_id || pid == cur.prev_producer_id;
        if pid == cur.producer_id && epoch == cur.last_producer_epoch && cur.state.is_idle() {
            // A retry of the bump that already happened.
            return Ok(InitDecision::Current {
                producer_id: cur.producer_id,
                epoch: cur.producer_epoch,
            });
        }
        if !known || (pid == cur.producer_id && epoch != cur.producer_epoch) {
            return Err(ResponseError::ProducerFenced);
        }
    }
    match cur.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
            Err(ResponseError::ConcurrentTransactions)
        }
        TxnState::Ongoing => {
            // Fence the producer of the ongoing transaction and abort it; the caller retries
            // and then gets the epoch after this one.
            let mut next = cur.bumped(new_producer_id);
            next.state = TxnState::PrepareAbort;
            next.last_update_ms = req.now_ms;
            Ok(InitDecision::Write(Transition {
                next,
                then: Then::RetryAndAbort,
            }))
        }
        _ => {
            let mut next = cur.bumped(new_producer_id);
            next.state = TxnState::Empty;
            next.partitions.clear();
            next.timeout_ms = req.timeout_ms;
            next.start_ms = -1;
            next.last_update_ms = req.now_ms;
            next.tv2 = false;
            Ok(InitDecision::Write(Transition {
                next,
                then: Then::ReplyProducer,
            }))
        }
    }
}

/// AddPartitionsToTxn (and AddOffsetsToTxn, whose partition is the group's
/// `__consumer_offsets` partition). `None`: every partition is already in the ongoing
/// transaction, nothing to write.
pub fn add_partitions(
    cur: &TxnMetadata,
    producer_id: i64,
    epoch: i16,
    partitions: &[TxnPartition],
    tv2: bool,
    now_ms: i64,
) -> Result<Option<Transition>, ResponseError> {
    cur.check_producer(producer_id, epoch)?;
    match cur.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
            return Err(ResponseError::ConcurrentTransactions)
        }
        TxnState::Dead => return Err(ResponseError::InvalidTxnState),
        _ => {}
    }
    if cur.state == TxnState::Ongoing && partitions.iter().all(|p| cur.partitions.contains(p)) {
        return Ok(None);
    }
    let mut next = cur.clone();
    if cur.state.is_idle() {
        next.partitions.clear();
        next.start_ms = now_ms;
        next.tv2 = tv2;
    }
    next.state = TxnState::Ongoing;
    next.partitions.extend(partitions.iter().cloned());
    next.last_update_ms = now_ms;
    Ok(Some(Transition {
        next,
        then: Then::Reply,
    }))
}

/// What EndTxn decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndDecision {
    /// A retry of an EndTxn that already completed: answer success with the current
    /// producer id and epoch.
    Done {
        producer_id: i64,
        epoch: i16,
    },
    Write(Transition),
}

/// EndTxn: `commit` or abort the ongoing transaction. `tv2`: the request is EndTxn v5+.
pub fn end_txn(
    cur: &TxnMetadata,
    producer_id: i64,
    epoch: i16,
    commit: bool,
    tv2: bool,
    now_ms: i64,
    new_producer_id: &mut dyn FnMut() -> i64,
) -> Result<EndDecision, ResponseError> {
    let (prepare, complete) = match commit {
        true => (TxnState::PrepareCommit, TxnState::CompleteCommit),
        false => (TxnState::PrepareAbort, TxnState::CompleteAbort),
    };
    // A TV2 retry names the epoch before the bump made at prepare.
    let retry =
        tv2 && cur.tv2 && producer_id == cur.producer_id && epoch == cur.last_producer_epoch;
    if retry {
        return match cur.state {
            s if s == complete => Ok(EndDecision::Done {
                producer_id: cur.producer_id,
                epoch: cur.producer_epoch,
            }),
            s if s == prepare => Err(ResponseError::ConcurrentTransactions),
            _ => Err(ResponseError::InvalidTxnState),
        };
    }
    cur.check_producer(producer_id, epoch)?;
    match cur.state {
        TxnState::Ongoing => {}
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort if tv2 && !commit => {
            // KIP-890: a TV2 client may abort with nothing started (its epoch still bumps).
        }
        s if s == complete && !tv2 => {
            // A TV1 retry of the EndTxn that completed.
            return Ok(EndDecision::Done {
                producer_id: cur.producer_id,
                epoch: cur.producer_epoch,
            });
        }
        s if s == prepare => return Err(ResponseError::ConcurrentTransactions),
        TxnState::PrepareEpochFence => return Err(ResponseError::ConcurrentTransactions),
        _ => return Err(ResponseError::InvalidTxnState),
    }
    let mut next = match tv2 {
        true => cur.bumped(new_producer_id),
        false => cur.clone(),
    };
    if cur.state.is_idle() {
        // A TV2 abort with nothing started: no markers, it completes at once.
        next.partitions.clear();
    }
    next.state = prepare;
    next.tv2 = tv2;
    next.last_update_ms = now_ms;
    Ok(EndDecision::Write(Transition {
        next,
        then: Then::ReplyAndMark,
    }))
}

/// Once every marker is written: PrepareX -> CompleteX, partitions cleared.
pub fn complete(cur: &TxnMetadata, now_ms: i64) -> Option<TxnMetadata> {
    let state = match cur.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        _ => return None,
    };
    let mut next = cur.clone();
    next.state = state;
    next.partitions.clear();
    next.start_ms = -1;
    next.last_update_ms = now_ms;
    Some(next)
}

/// The producer epoch markers for a prepared transaction carry: the stored one (with TV2
/// it is already the bumped epoch, as Kafka writes them).
pub fn marker_epoch(cur: &TxnMetadata) -> i16 {
    cur.producer_epoch
}

/// A transaction past its timeout: fence its producer (epoch + 1) and abort it.
pub fn expire(
    cur: &TxnMetadata,
    now_ms: i64,
    new_producer_id: &mut dyn FnMut() -> i64,
) -> Option<Transition> {
    if cur.state != TxnState::Ongoing || cur.start_ms < 0 {
        return None;
    }
    if now_ms < cur.start_ms.saturating_add(cur.timeout_ms as i64) {
        return None;
    }
    let mut next = cur.bumped(new_producer_id);
    next.state = TxnState::PrepareAbort;
    next.last_update_ms = now_ms;
    Some(Transition {
        next,
        then: Then::Abort,
    })
}

/// Whether `transactional.id.expiration.ms` has passed since the id was last used with no
/// transaction in flight (Kafka's `TransactionStateManager` removes such ids: their
/// producer starts afresh with InitProducerId).
pub fn id_expired(cur: &TxnMetadata, now_ms: i64, expiration_ms: i64) -> bool {
    matches!(
        cur.state,
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
    ) && now_ms.saturating_sub(cur.last_update_ms) >= expiration_ms
}

// ---- the record format of `__transaction_state` --------------------------------------------

/// Format version of [`encode`].
const RECORD_VERSION: i16 = 0;

/// The record key: version 0 + the transactional id (as Kafka's `TransactionLogKey`).
pub fn encode_key(id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + id.len());
    b.put_i16(0);
    b.put_i16(id.len() as i16);
    b.put_slice(id.as_bytes());
    b.freeze()
}

pub fn decode_key(mut b: &[u8]) -> Option<String> {
    if b.remaining() < 4 || b.get_i16() != 0 {
        return None;
    }
    let n = usize::try_from(b.get_i16()).ok()?;
    let s = b.get(..n)?;
    String::from_utf8(s.to_vec()).ok()
}

/// The record value (a tombstone is an absent value: the id expired).
pub fn encode(m: &TxnMetadata) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(RECORD_VERSION);
    b.put_i64(m.producer_id);
    b.put_i64(m.prev_producer_id);
    b.put_i16(m.producer_epoch);
    b.put_i16(m.last_producer_epoch);
    b.put_i32(m.timeout_ms);
    b.put_i8(m.state as i8);
    b.put_i64(m.start_ms);
    b.put_i64(m.last_update_ms);
    b.put_u8(u8::from(m.tv2));
    b.put_i32(m.partitions.len() as i32);
    for (topic, p) in &m.partitions {
        b.put_i16(topic.len() as i16);
        b.put_slice(topic.as_bytes());
        b.put_i32(*p);
    }
    b.freeze()
}

pub fn decode(id: &str, mut b: &[u8]) -> Option<TxnMetadata> {
    if b.remaining() < 2 + 8 + 8 + 2 + 2 + 4 + 1 + 8 + 8 + 1 + 4 || b.get_i16() != RECORD_VERSION {
        return None;
    }
    let producer_id = b.get_i64();
    let prev_producer_id = b.get_i64();
    let producer_epoch = b.get_i16();
    let last_producer_epoch = b.get_i16();
    let timeout_ms = b.get_i32();
    let state = TxnState::from_id(b.get_i8())?;
    let start_ms = b.get_i64();
    let last_update_ms = b.get_i64();
    let tv2 = b.get_u8() != 0;
    let n = b.get_i32();
    // Each partition takes at least 6 bytes: never trust a count the bytes cannot hold.
    if n < 0 || n as usize > b.remaining() / 6 {
        return None;
    }
    let mut partitions = BTreeSet::new();
    for _ in 0..n {
        if b.remaining() < 2 {
            return None;
        }
        let len = usize::try_from(b.get_i16()).ok()?;
        if b.remaining() < len + 4 {
            return None;
        }
        let topic = String::from_utf8(b[..len].to_vec()).ok()?;
        b.advance(len);
        partitions.insert((topic, b.get_i32()));
    }
    if b.has_remaining() {
        return None;
    }
    Some(TxnMetadata {
        transactional_id: id.to_string(),
        producer_id,
        prev_producer_id,
        producer_epoch,
        last_producer_epoch,
        timeout_ms,
        state,
        partitions,
        start_ms,
        last_update_ms,
        tv2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::partition_for;

    #[test]
    fn only_an_id_idle_with_no_transaction_in_flight_expires() {
        let mut m = TxnMetadata::new("t", 7, 60_000, 1_000);
        for (state, expires) in [
            (TxnState::Empty, true),
            (TxnState::CompleteCommit, true),
            (TxnState::CompleteAbort, true),
            (TxnState::Ongoing, false),
            (TxnState::PrepareCommit, false),
            (TxnState::PrepareAbort, false),
            (TxnState::PrepareEpochFence, false),
            (TxnState::Dead, false),
        ] {
            m.state = state;
            assert_eq!(id_expired(&m, 1_000 + 500, 500), expires, "{state:?}");
            assert!(!id_expired(&m, 1_000 + 499, 500), "{state:?} too soon");
        }
    }

    const MAX: i32 = 900_000;

    fn ids() -> impl FnMut() -> i64 {
        let mut next = 1000;
        move || {
            next += 1;
            next
        }
    }

    fn init(
        cur: Option<&TxnMetadata>,
        expected: Option<(i64, i16)>,
    ) -> Result<InitDecision, ResponseError> {
        init_producer_id(
            "t",
            cur,
            InitRequest {
                timeout_ms: 60_000,
                expected,
                now_ms: 5,
            },
            MAX,
            &mut ids(),
        )
    }

    fn written(d: InitDecision) -> TxnMetadata {
        match d {
            InitDecision::Write(t) => t.next,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    fn tp(t: &str, p: i32) -> TxnPartition {
        (t.to_string(), p)
    }

    #[test]
    fn init_producer_id_allocates_bumps_and_fences() {
        let bad = init_producer_id(
            "t",
            None,
            InitRequest {
                timeout_ms: MAX + 1,
                expected: None,
                now_ms: 0,
            },
            MAX,
            &mut ids(),
        );
        assert_eq!(bad, Err(ResponseError::InvalidTransactionTimeout));

        let m = written(init(None, None).unwrap());
        assert_eq!(
            (m.producer_id, m.producer_epoch, m.state),
            (1001, 0, TxnState::Empty)
        );
        // A second producer with the same id: the epoch goes up, the first is fenced.
        let m2 = written(init(Some(&m), None).unwrap());
        assert_eq!(
            (m2.producer_id, m2.producer_epoch, m2.last_producer_epoch),
            (1001, 1, 0)
        );
        assert_eq!(
            add_partitions(&m2, 1001, 0, &[tp("a", 0)], false, 6),
            Err(ResponseError::ProducerFenced)
        );
        // KIP-360: the same caller retrying its bump gets the same answer, a zombie is fenced.
        assert_eq!(
            init(Some(&m2), Some((1001, 0))).unwrap(),
            InitDecision::Current {
                producer_id: 1001,
                epoch: 1
            }
        );
        let m3 = written(init(Some(&m2), Some((1001, 1))).unwrap());
        assert_eq!(m3.producer_epoch, 2);
        assert_eq!(
            init(Some(&m3), Some((1001, 0))),
            Err(ResponseError::ProducerFenced)
        );
        assert_eq!(
            init(Some(&m3), Some((77, 2))),
            Err(ResponseError::ProducerFenced)
        );

        // An ongoing transaction is fenced and aborted; the caller is told to retry.
        let ongoing = add_partitions(&m3, 1001, 2, &[tp("a", 0)], false, 7)
            .unwrap()
            .unwrap()
            .next;
        let InitDecision::Write(t) = init(Some(&ongoing), None).unwrap() else {
            panic!("fencing writes")
        };
        assert_eq!(t.then, Then::RetryAndAbort);
        assert_eq!(
            (t.next.state, t.next.producer_epoch),
            (TxnState::PrepareAbort, 3)
        );
        assert_eq!(
            t.next.partitions.len(),
            1,
            "the abort markers go to its partitions"
        );
        assert_eq!(
            init(Some(&t.next), None),
            Err(ResponseError::ConcurrentTransactions)
        );

        // An exhausted epoch moves to a new producer id.
        let mut old = m3.clone();
        old.producer_epoch = EPOCH_MAX;
        let fresh = written(init(Some(&old), None).unwrap());
        assert_eq!(
            (
                fresh.producer_id,
                fresh.producer_epoch,
                fresh.prev_producer_id
            ),
            (1001, 0, 1001)
        );
    }

    #[test]
    fn a_transaction_commits_through_prepare_and_complete() {
        let m = written(init(None, None).unwrap());
        let t = add_partitions(&m, 1001, 0, &[tp("a", 0), tp("b", 1)], false, 10)
            .unwrap()
            .unwrap();
        assert_eq!((t.next.state, t.next.start_ms), (TxnState::Ongoing, 10));
        let m = t.next;
        assert_eq!(
            add_partitions(&m, 1001, 0, &[tp("a", 0)], false, 11),
            Ok(None)
        );
        assert_eq!(m.verify(1001, 0, &tp("b", 1)), Ok(()));
        assert_eq!(
            m.verify(1001, 0, &tp("c", 0)),
            Err(ResponseError::TransactionAbortable)
        );
        assert_eq!(
            add_partitions(&m, 1002, 0, &[tp("a", 0)], false, 11),
            Err(ResponseError::InvalidProducerIdMapping)
        );

        let EndDecision::Write(t) = end_txn(&m, 1001, 0, true, false, 12, &mut ids()).unwrap()
        else {
            panic!("EndTxn writes PrepareCommit")
        };
        assert_eq!(
            (t.next.state, t.next.producer_epoch),
            (TxnState::PrepareCommit, 0)
        );
        let prepared = t.next;
        assert_eq!(marker_epoch(&prepared), 0);
        // While markers are written: retries wait, the other outcome is refused.
        assert_eq!(
            end_txn(&prepared, 1001, 0, true, false, 13, &mut ids()),
            Err(ResponseError::ConcurrentTransactions)
        );
        assert_eq!(
            end_txn(&prepared, 1001, 0, false, false, 13, &mut ids()),
            Err(ResponseError::InvalidTxnState)
        );
        assert_eq!(
            add_partitions(&prepared, 1001, 0, &[tp("a", 0)], false, 13),
            Err(ResponseError::ConcurrentTransactions)
        );
        let done = complete(&prepared, 14).unwrap();
        assert_eq!(
            (done.state, done.partitions.len()),
            (TxnState::CompleteCommit, 0)
        );
        assert_eq!(
            end_txn(&done, 1001, 0, true, false, 15, &mut ids()),
            Ok(EndDecision::Done {
                producer_id: 1001,
                epoch: 0
            })
        );
        assert_eq!(
            end_txn(&done, 1001, 0, false, false, 15, &mut ids()),
            Err(ResponseError::InvalidTxnState)
        );
        // TV1 may not end a transaction that never started.
        let empty = written(init(Some(&done), None).unwrap());
        assert_eq!(
            end_txn(&empty, 1001, 1, true, false, 16, &mut ids()),
            Err(ResponseError::InvalidTxnState)
        );
        // The next transaction starts afresh.
        let next = add_partitions(&done, 1001, 0, &[tp("c", 0)], false, 20)
            .unwrap()
            .unwrap()
            .next;
        assert_eq!(next.partitions, BTreeSet::from([tp("c", 0)]));
        assert_eq!(next.start_ms, 20);
    }

    #[test]
    fn transaction_version_2_bumps_the_epoch_at_every_end() {
        let m = written(init(None, None).unwrap());
        let m = add_partitions(&m, 1001, 0, &[tp("a", 0)], true, 10)
            .unwrap()
            .unwrap()
            .next;
        assert!(m.tv2);
        let EndDecision::Write(t) = end_txn(&m, 1001, 0, false, true, 11, &mut ids()).unwrap()
        else {
            panic!("EndTxn writes PrepareAbort")
        };
        assert_eq!(
            (t.next.state, t.next.producer_epoch),
            (TxnState::PrepareAbort, 1)
        );
        assert_eq!(marker_epoch(&t.next), 1, "markers carry the bumped epoch");
        let done = complete(&t.next, 12).unwrap();
        // A retry names the old epoch and gets the new one.
        assert_eq!(
            end_txn(&done, 1001, 0, false, true, 13, &mut ids()),
            Ok(EndDecision::Done {
                producer_id: 1001,
                epoch: 1
            })
        );
        assert_eq!(
            end_txn(&done, 1001, 0, true, true, 13, &mut ids()),
            Err(ResponseError::InvalidTxnState)
        );
        // An abort with nothing started is allowed and still bumps.
        let EndDecision::Write(t) = end_txn(&done, 1001, 1, false, true, 14, &mut ids()).unwrap()
        else {
            panic!("an empty abort writes")
        };
        assert_eq!((t.next.producer_epoch, t.next.partitions.len()), (2, 0));
    }

    #[test]
    fn a_transaction_past_its_timeout_is_fenced_and_aborted() {
        let m = written(init(None, None).unwrap());
        let m = add_partitions(&m, 1001, 0, &[tp("a", 0)], false, 100)
            .unwrap()
            .unwrap()
            .next;
        assert_eq!(expire(&m, 100 + 59_999, &mut ids()), None);
        let t = expire(&m, 100 + 60_000, &mut ids()).unwrap();
        assert_eq!(
            (t.next.state, t.next.producer_epoch, t.then),
            (TxnState::PrepareAbort, 1, Then::Abort)
        );
        // The zombie's EndTxn is fenced.
        assert_eq!(
            end_txn(&t.next, 1001, 0, true, false, 1, &mut ids()),
            Err(ResponseError::ProducerFenced)
        );
    }

    #[test]
    fn records_round_trip_and_ids_land_where_kafka_puts_them() {
        let m = written(init(None, None).unwrap());
        let m = add_partitions(&m, 1001, 0, &[tp("a", 0), tp("bé", 7)], true, 10)
            .unwrap()
            .unwrap()
            .next;
        let v = encode(&m);
        assert_eq!(decode("t", &v), Some(m.clone()));
        assert_eq!(decode_key(&encode_key("txn-1")).as_deref(), Some("txn-1"));
        // Truncated or padded values and absurd counts are refused, never trusted.
        for cut in 0..v.len() {
            assert_eq!(decode("t", &v[..cut]), None, "cut at {cut}");
        }
        let mut padded = v.to_vec();
        padded.push(0);
        assert_eq!(decode("t", &padded), None);
        let mut absurd = v.to_vec();
        // The count sits before the two partitions: "a" (2 + 1 + 4 bytes), "bé" (2 + 3 + 4).
        let at = v.len() - 7 - 9 - 4;
        absurd[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(decode("t", &absurd), None);
        // Math.abs("my-group".hashCode()) % 50 == 12, as for groups.
        assert_eq!(partition_for("my-group", 50), 12);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
    }
}
