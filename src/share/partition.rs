//! One share partition (KIP-932): the records of one topic partition as one share group
//! consumes them, as a pure state machine. Many members read the same partition; each record
//! is acquired by one member at a time, under a lock that expires, and ends acknowledged
//! (ACCEPT) or archived (REJECT, a GAP, or too many deliveries).
//!
//! Kafka's model (`SharePartition`): the share-partition start offset (SPSO) is the first
//! offset not yet finished with; the end offset (SPEO) the first never acquired. Between them
//! every record is Available, Acquired, Acknowledged or Archived, with the number of times it
//! was delivered. Whenever the records at the start are finished the start moves past them,
//! so the in-flight window holds only what is still undecided or sits behind such a record.
//! The window is bounded (`group.share.partition.max.record.locks`): no new record is
//! acquired while that many are in flight.
//!
//! Time is the caller's: every call that starts or checks a lock takes `now_ms`.

use std::collections::BTreeMap;

/// A record's state, with Kafka's codes (`RecordState`): the persisted state uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Available = 0,
    Acquired = 1,
    Acknowledged = 2,
    Archived = 4,
}

/// An acknowledgement type, with Kafka's codes (`AcknowledgeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckType {
    /// An offset with no record the client could deliver (a control record, or one
    /// compaction removed): archived.
    Gap = 0,
    Accept = 1,
    Release = 2,
    Reject = 3,
    /// KIP-1222: keep the lock for another lock duration; the delivery count stays.
    Renew = 4,
}

impl AckType {
    pub fn from_code(code: i8) -> Option<AckType> {
        Some(match code {
            0 => AckType::Gap,
            1 => AckType::Accept,
            2 => AckType::Release,
            3 => AckType::Reject,
            4 => AckType::Renew,
            _ => return None,
        })
    }
}

/// Why acknowledgements were refused: nothing of them was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckError {
    /// An offset is not acquired by this member (INVALID_RECORD_STATE).
    NotAcquired(i64),
    /// The batch is malformed: first past last, or as many types as neither 1 nor the
    /// batch's length, or an unknown type (INVALID_REQUEST).
    Invalid(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct InFlight {
    state: RecordState,
    deliveries: i16,
    /// The member holding the lock, while Acquired.
    owner: Option<String>,
    /// When the lock expires (ms), while Acquired.
    lock_until_ms: i64,
}

/// Records handed to a member: `first..=last`, each delivered `deliveries` times now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub deliveries: i16,
}

/// The limits a share partition runs under (the group's `share.*` configs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub lock_ms: i64,
    pub delivery_count_limit: i16,
    pub max_record_locks: i64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            lock_ms: 30_000,
            delivery_count_limit: 5,
            max_record_locks: 2000,
        }
    }
}

/// The persisted form (Kafka's ShareSnapshot): the start offset and the in-flight records
/// that are not simply available and never delivered, as `[first, last]` runs with their
/// state and delivery count. Acquired records are stored as Available with their count: a
/// lock does not outlive the broker holding it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    pub start: i64,
    /// (first, last, state code 0/2/4, delivery count)
    pub runs: Vec<(i64, i64, i8, i16)>,
}

/// How many records at or past `start` have completed delivery (acknowledged or archived)
/// in `runs`: KIP-1226's DeliveryCompleteCount, which share-partition lag subtracts.
pub fn delivery_complete(start: i64, runs: &[(i64, i64, i8, i16)]) -> i32 {
    let done = [RecordState::Acknowledged as i8, RecordState::Archived as i8];
    let n: i64 = runs
        .iter()
        .filter(|r| done.contains(&r.2))
        .map(|&(first, last, _, _)| (last - first.max(start) + 1).max(0))
        .sum();
    n.min(i32::MAX as i64) as i32
}

#[derive(Debug, Clone)]
pub struct SharePartition {
    start: i64,
    end: i64,
    /// Every offset in `start..end` that has a record; offsets with none (gaps the log
    /// left) are simply absent.
    records: BTreeMap<i64, InFlight>,
    pub limits: Limits,
}

impl SharePartition {
    /// A share partition that starts consuming at `start` (from `share.auto.offset.reset`
    /// when the group first reads the partition).
    pub fn new(start: i64, limits: Limits) -> SharePartition {
        SharePartition {
            start,
            end: start,
            records: BTreeMap::new(),
            limits,
        }
    }

    /// Rebuilds a share partition from its persisted state.
    pub fn restore(s: &Snapshot, limits: Limits) -> SharePartition {
        let mut p = SharePartition::new(s.start, limits);
        for &(first, last, state, deliveries) in &s.runs {
            let state = match state {
                2 => RecordState::Acknowledged,
                4 => RecordState::Archived,
                _ => RecordState::Available,
            };
            for o in first.max(s.start)..=last {
                p.records.insert(
                    o,
                    InFlight {
                        state,
                        deliveries,
                        owner: None,
                        lock_until_ms: 0,
                    },
                );
            }
            p.end = p.end.max(last + 1);
        }
        p.advance();
        p
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut runs: Vec<(i64, i64, i8, i16)> = Vec::new();
        for (&o, r) in &self.records {
            let state = match r.state {
                RecordState::Acquired | RecordState::Available => 0,
                s => s as i8,
            };
            if state == 0 && r.deliveries == 0 {
                continue;
            }
            match runs.last_mut() {
                Some(last) if last.1 + 1 == o && last.2 == state && last.3 == r.deliveries => {
                    last.1 = o
                }
                _ => runs.push((o, o, state, r.deliveries)),
            }
        }
        Snapshot {
            start: self.start,
            runs,
        }
    }

    /// The share-partition start offset (SPSO).
    pub fn start(&self) -> i64 {
        self.start
    }

    /// The share-partition end offset (SPEO): the first offset never acquired.
    pub fn end(&self) -> i64 {
        self.end
    }

    /// Where the next read of the log should begin: the first available record, or the
    /// end of the window.
    pub fn next_read(&self) -> i64 {
        self.records
            .iter()
            .find(|(_, r)| r.state == RecordState::Available)
            .map_or(self.end, |(&o, _)| o)
    }

    /// Whether anything could be acquired from a log that ends at `log_end`.
    pub fn can_acquire(&self, log_end: i64) -> bool {
        self.next_read() < self.end || (log_end > self.end && !self.window_full())
    }

    fn window_full(&self) -> bool {
        self.end - self.start >= self.limits.max_record_locks
    }

    /// How many records are in flight: acquired, or waiting for an earlier record to be
    /// finished with.
    pub fn in_flight(&self) -> usize {
        self.records.len()
    }

    /// How many records a member holds now.
    pub fn acquired(&self) -> usize {
        self.records
            .values()
            .filter(|r| r.state == RecordState::Acquired)
            .count()
    }

    /// The log start moved to `log_start` (retention, DeleteRecords): records before it are
    /// gone, so they are finished with.
    pub fn log_start_moved(&mut self, log_start: i64) {
        if log_start <= self.start {
            return;
        }
        self.records = self.records.split_off(&log_start);
        self.start = log_start;
        self.end = self.end.max(log_start);
    }

    /// Acquires for `member` what it may have of the log batches `batches` (each the
    /// `[first, last]` offsets of one batch, in order, as a log read returned them): the
    /// available records among them and the records past the window's end, while the
    /// window has room. Whole batches are taken until at least `max_records` records are
    /// acquired (`batch_optimized`, Kafka's default acquire mode).
    pub fn acquire(
        &mut self,
        member: &str,
        batches: &[(i64, i64)],
        max_records: usize,
        now_ms: i64,
    ) -> Vec<Acquired> {
        self.acquire_records(member, batches, &[], max_records, false, now_ms)
    }

    /// [`Self::acquire`], or with `split` (KIP-1206's `record_limit` mode) at most
    /// `max_records` records, ending inside a batch if need be. The batches whose first
    /// offsets are in `passed_over` are never delivered (a `read_committed` share group's
    /// aborted transactions): their records are archived, as Kafka's share partition does.
    pub fn acquire_records(
        &mut self,
        member: &str,
        batches: &[(i64, i64)],
        passed_over: &[i64],
        max_records: usize,
        split: bool,
        now_ms: i64,
    ) -> Vec<Acquired> {
        let mut out: Vec<Acquired> = Vec::new();
        let mut taken = 0usize;
        let max_records = max_records.max(1);
        let mut moved = false;
        for &(first, last) in batches {
            if taken >= max_records {
                break;
            }
            if passed_over.contains(&first) {
                if !self.pass_over(first, last) {
                    break;
                }
                moved = true;
                continue;
            }
            for o in first.max(self.start)..=last {
                if split && taken >= max_records {
                    break;
                }
                let deliveries = if o >= self.end {
                    if self.window_full() {
                        break;
                    }
                    // The window grows over this offset; any offset skipped on the way
                    // had no record.
                    self.end = o + 1;
                    1
                } else {
                    match self.records.get(&o) {
                        Some(r) if r.state == RecordState::Available => r.deliveries + 1,
                        _ => continue,
                    }
                };
                self.records.insert(
                    o,
                    InFlight {
                        state: RecordState::Acquired,
                        deliveries,
                        owner: Some(member.to_string()),
                        lock_until_ms: now_ms + self.limits.lock_ms,
                    },
                );
                taken += 1;
                match out.last_mut() {
                    Some(a) if a.last + 1 == o && a.deliveries == deliveries => a.last = o,
                    _ => out.push(Acquired {
                        first: o,
                        last: o,
                        deliveries,
                    }),
                }
            }
        }
        if moved {
            self.advance();
        }
        out
    }

    /// Archives the records of `first..=last` that wait to be delivered, and takes the
    /// offsets past the window's end into it as finished with; false when the window is full.
    fn pass_over(&mut self, first: i64, last: i64) -> bool {
        if last < self.start || last < self.end {
            for r in self
                .records
                .range_mut(first.max(self.start)..=last)
                .map(|(_, r)| r)
            {
                if r.state == RecordState::Available {
                    r.state = RecordState::Archived;
                }
            }
            return true;
        }
        if self.window_full() {
            return false;
        }
        self.end = last + 1;
        true
    }

    /// Applies one acknowledgement batch of `member`: `types` holds one type for the whole
    /// range or one per offset. Every offset with a record must be acquired by `member`,
    /// else nothing is applied. Offsets before the start were finished with already and
    /// are passed over, as Kafka does.
    pub fn acknowledge(
        &mut self,
        member: &str,
        first: i64,
        last: i64,
        types: &[i8],
        renew_allowed: bool,
        now_ms: i64,
    ) -> Result<(), AckError> {
        if first > last {
            return Err(AckError::Invalid("First offset is after the last offset."));
        }
        let len = last - first + 1;
        if types.len() != 1 && types.len() as i64 != len {
            return Err(AckError::Invalid(
                "Acknowledge types must hold one type or one per offset.",
            ));
        }
        let mut kinds = Vec::with_capacity(types.len());
        for &t in types {
            match AckType::from_code(t) {
                Some(AckType::Renew) if !renew_allowed => {
                    return Err(AckError::Invalid("Renew acknowledgements are not enabled."))
                }
                Some(k) => kinds.push(k),
                None => return Err(AckError::Invalid("Unknown acknowledge type.")),
            }
        }
        let kind_at = |o: i64| {
            kinds[if kinds.len() == 1 {
                0
            } else {
                (o - first) as usize
            }]
        };
        // Below the start offset every record is finished: nothing there is acquired (Kafka:
        // "batch record not found").
        if first < self.start
            && (first..=last.min(self.start - 1)).any(|o| kind_at(o) != AckType::Gap)
        {
            return Err(AckError::NotAcquired(first));
        }
        for (&o, r) in self.records.range(first.max(self.start)..=last) {
            if kind_at(o) == AckType::Gap && r.state != RecordState::Acquired {
                continue;
            }
            if r.state != RecordState::Acquired || r.owner.as_deref() != Some(member) {
                return Err(AckError::NotAcquired(o));
            }
        }
        if last >= self.end && (first.max(self.start)..=last).any(|o| kind_at(o) != AckType::Gap) {
            return Err(AckError::NotAcquired(self.end.max(first)));
        }
        let limit = self.limits.delivery_count_limit;
        let lock_ms = self.limits.lock_ms;
        for (&o, r) in self.records.range_mut(first.max(self.start)..=last) {
            match kind_at(o) {
                AckType::Accept => r.state = RecordState::Acknowledged,
                AckType::Reject | AckType::Gap => r.state = RecordState::Archived,
                AckType::Release => r.state = released(r.deliveries, limit),
                AckType::Renew => {
                    r.lock_until_ms = now_ms + lock_ms;
                    continue;
                }
            }
            r.owner = None;
        }
        self.advance();
        Ok(())
    }

    /// Gives back every record `member` holds (its session closed, or it left the group);
    /// true if any was held.
    pub fn release_member(&mut self, member: &str) -> bool {
        let limit = self.limits.delivery_count_limit;
        let mut any = false;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired && r.owner.as_deref() == Some(member) {
                r.state = released(r.deliveries, limit);
                r.owner = None;
                any = true;
            }
        }
        if any {
            self.advance();
        }
        any
    }

    /// Releases every lock that expired by `now_ms`: how many records' locks did.
    pub fn expire(&mut self, now_ms: i64) -> usize {
        let limit = self.limits.delivery_count_limit;
        let mut expired = 0;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired && r.lock_until_ms <= now_ms {
                r.state = released(r.deliveries, limit);
                r.owner = None;
                expired += 1;
            }
        }
        if expired > 0 {
            self.advance();
        }
        expired
    }

    /// When the earliest lock expires, if any record is acquired.
    pub fn next_expiry_ms(&self) -> Option<i64> {
        self.records
            .values()
            .filter(|r| r.state == RecordState::Acquired)
            .map(|r| r.lock_until_ms)
            .min()
    }

    /// Moves the start past the records finished with.
    fn advance(&mut self) {
        loop {
            match self.records.first_key_value() {
                Some((&o, r))
                    if matches!(r.state, RecordState::Acknowledged | RecordState::Archived) =>
                {
                    self.records.remove(&o);
                    self.start = o + 1;
                }
                Some((&o, _)) => {
                    // Offsets with no record before the first undecided one are done too.
                    self.start = self.start.max(o);
                    return;
                }
                None => {
                    self.start = self.end.max(self.start);
                    return;
                }
            }
        }
    }
}

/// What a released or expired record becomes: available again, or archived once it was
/// delivered as often as the limit allows.
fn released(deliveries: i16, limit: i16) -> RecordState {
    if deliveries >= limit {
        RecordState::Archived
    } else {
        RecordState::Available
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCEPT: i8 = 1;
    const RELEASE: i8 = 2;
    const REJECT: i8 = 3;
    const RENEW: i8 = 4;

    fn limits() -> Limits {
        Limits {
            lock_ms: 1000,
            delivery_count_limit: 3,
            max_record_locks: 100,
        }
    }

    fn acq(first: i64, last: i64, deliveries: i16) -> Acquired {
        Acquired {
            first,
            last,
            deliveries,
        }
    }

    #[test]
    fn each_record_goes_to_one_member_at_a_time() {
        let mut p = SharePartition::new(0, limits());
        assert_eq!(p.acquire("a", &[(0, 4)], 500, 0), vec![acq(0, 4, 1)]);
        // The same batch read again by another member: nothing of it is free.
        assert_eq!(
            p.acquire("b", &[(0, 4), (5, 9)], 500, 0),
            vec![acq(5, 9, 1)]
        );
        assert_eq!(p.end(), 10);
        assert_eq!(p.acquired(), 10);
        assert_eq!(p.next_read(), 10);
    }

    #[test]
    fn accepted_records_move_the_start_in_order() {
        let mut p = SharePartition::new(0, limits());
        p.acquire("a", &[(0, 9)], 500, 0);
        p.acknowledge("a", 5, 9, &[ACCEPT], false, 0).unwrap();
        // 0..=4 are still held, so the start stays.
        assert_eq!(p.start(), 0);
        p.acknowledge("a", 0, 4, &[ACCEPT], false, 0).unwrap();
        assert_eq!(p.start(), 10);
        assert_eq!(p.in_flight(), 0);
        // Finished records cannot be acknowledged again (Kafka's INVALID_RECORD_STATE).
        assert_eq!(
            p.acknowledge("a", 3, 12, &[ACCEPT], false, 0),
            Err(AckError::NotAcquired(3))
        );
    }

    #[test]
    fn released_and_expired_records_are_delivered_again_until_the_limit() {
        let mut p = SharePartition::new(0, limits());
        p.acquire("a", &[(0, 1)], 500, 0);
        p.acknowledge("a", 0, 1, &[RELEASE, ACCEPT], false, 0)
            .unwrap();
        assert_eq!(p.start(), 0);
        assert_eq!(p.next_read(), 0);
        // Delivered a second time, to another member.
        assert_eq!(p.acquire("b", &[(0, 1)], 500, 10), vec![acq(0, 0, 2)]);
        // Its lock runs out: a third delivery, the last the limit allows.
        assert_eq!(p.expire(1009), 0);
        assert!(p.expire(1010) > 0);
        assert_eq!(p.acquire("c", &[(0, 1)], 500, 2000), vec![acq(0, 0, 3)]);
        assert!(p.release_member("c"));
        // Archived: never delivered again, and the start moves past it.
        assert_eq!(p.start(), 2);
        assert!(p.acquire("d", &[(0, 1)], 500, 3000).is_empty());
    }

    #[test]
    fn rejected_records_are_never_delivered_again() {
        let mut p = SharePartition::new(0, limits());
        p.acquire("a", &[(0, 2)], 500, 0);
        p.acknowledge("a", 0, 2, &[ACCEPT, REJECT, RELEASE], false, 0)
            .unwrap();
        assert_eq!(p.start(), 2);
        assert_eq!(p.acquire("a", &[(0, 2)], 500, 0), vec![acq(2, 2, 2)]);
    }

    #[test]
    fn acknowledging_what_another_member_holds_changes_nothing() {
        let mut p = SharePartition::new(0, limits());
        p.acquire("a", &[(0, 4)], 500, 0);
        p.acquire("b", &[(5, 9)], 500, 0);
        assert_eq!(
            p.acknowledge("a", 3, 6, &[ACCEPT], false, 0),
            Err(AckError::NotAcquired(5))
        );
        assert_eq!(p.acquired(), 10);
        // Past the window's end nothing was acquired by anyone.
        assert_eq!(
            p.acknowledge("b", 5, 12, &[ACCEPT], false, 0),
            Err(AckError::NotAcquired(10))
        );
        // After a lock expired, the old holder's acknowledgement is refused.
        p.expire(1000);
        assert_eq!(
            p.acknowledge("a", 0, 4, &[ACCEPT], false, 1000),
            Err(AckError::NotAcquired(0))
        );
        assert!(matches!(
            p.acknowledge("a", 4, 3, &[ACCEPT], false, 0),
            Err(AckError::Invalid(_))
        ));
        assert!(matches!(
            p.acknowledge("a", 0, 2, &[ACCEPT, ACCEPT], false, 0),
            Err(AckError::Invalid(_))
        ));
        assert!(matches!(
            p.acknowledge("a", 0, 0, &[9], false, 0),
            Err(AckError::Invalid(_))
        ));
    }

    #[test]
    fn renew_keeps_the_lock_and_the_count_only_when_allowed() {
        let mut p = SharePartition::new(0, limits());
        p.acquire("a", &[(0, 0)], 500, 0);
        assert!(matches!(
            p.acknowledge("a", 0, 0, &[RENEW], false, 900),
            Err(AckError::Invalid(_))
        ));
        p.acknowledge("a", 0, 0, &[RENEW], true, 900).unwrap();
        assert_eq!(p.expire(1500), 0);
        assert!(p.expire(1900) > 0);
        assert_eq!(p.acquire("a", &[(0, 0)], 500, 2000), vec![acq(0, 0, 2)]);
    }

    #[test]
    fn delivery_complete_counts_acknowledged_and_archived_records_past_the_start() {
        let runs = [(0, 4, 2, 1), (5, 5, 0, 1), (6, 7, 4, 5), (8, 9, 2, 1)];
        assert_eq!(delivery_complete(0, &runs), 9);
        // Runs below the start count only from it.
        assert_eq!(delivery_complete(3, &runs), 6);
        assert_eq!(delivery_complete(10, &runs), 0);
        assert_eq!(delivery_complete(0, &[(0, 9, 0, 3)]), 0);
    }

    #[test]
    fn record_limit_splits_a_batch() {
        let mut p = SharePartition::new(0, limits());
        assert_eq!(
            p.acquire_records("a", &[(0, 9)], &[], 3, true, 0),
            vec![acq(0, 2, 1)]
        );
        assert_eq!(
            p.acquire_records("b", &[(0, 9)], &[], 3, true, 0),
            vec![acq(3, 5, 1)]
        );
        // Batch-optimized takes the rest of the batch.
        assert_eq!(p.acquire("c", &[(0, 9)], 3, 0), vec![acq(6, 9, 1)]);
    }

    #[test]
    fn passed_over_batches_are_never_delivered() {
        let mut p = SharePartition::new(0, limits());
        // 0..=1 delivered, 2..=4 aborted, 5 delivered.
        assert_eq!(
            p.acquire_records("a", &[(0, 1), (2, 4), (5, 5)], &[2], 500, false, 0),
            vec![acq(0, 1, 1), acq(5, 5, 1)]
        );
        p.acknowledge("a", 0, 1, &[ACCEPT], false, 0).unwrap();
        assert_eq!(p.start(), 5);
        // An aborted batch at the end of what was read: the window takes it in, finished.
        assert_eq!(
            p.acquire_records("a", &[(6, 8)], &[6], 500, false, 0),
            vec![]
        );
        p.acknowledge("a", 5, 5, &[ACCEPT], false, 0).unwrap();
        assert_eq!(p.start(), 9);
    }

    #[test]
    fn gaps_are_archived_and_missing_offsets_skipped() {
        let mut p = SharePartition::new(0, limits());
        // A batch of 0..=2, then (after a control batch at 3) one at 4..=5.
        assert_eq!(
            p.acquire("a", &[(0, 2), (4, 5)], 500, 0),
            vec![acq(0, 2, 1), acq(4, 5, 1)]
        );
        p.acknowledge(
            "a",
            0,
            5,
            &[ACCEPT, ACCEPT, ACCEPT, 0, ACCEPT, ACCEPT],
            false,
            0,
        )
        .unwrap();
        assert_eq!(p.start(), 6);
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn whole_batches_are_taken_until_max_records() {
        let mut p = SharePartition::new(0, limits());
        assert_eq!(
            p.acquire("a", &[(0, 2), (3, 5), (6, 8)], 4, 0),
            vec![acq(0, 5, 1)]
        );
        assert_eq!(p.next_read(), 6);
    }

    #[test]
    fn the_window_is_bounded() {
        let mut p = SharePartition::new(
            0,
            Limits {
                max_record_locks: 5,
                ..limits()
            },
        );
        assert_eq!(p.acquire("a", &[(0, 9)], 500, 0), vec![acq(0, 4, 1)]);
        assert!(!p.can_acquire(10));
        p.acknowledge("a", 0, 1, &[ACCEPT], false, 0).unwrap();
        assert!(p.can_acquire(10));
        assert_eq!(p.acquire("b", &[(0, 9)], 500, 0), vec![acq(5, 6, 1)]);
    }

    #[test]
    fn the_start_follows_the_log_start() {
        let mut p = SharePartition::new(0, limits());
        p.acquire("a", &[(0, 9)], 500, 0);
        p.log_start_moved(5);
        assert_eq!(p.start(), 5);
        assert_eq!(p.acquired(), 5);
        p.log_start_moved(20);
        assert_eq!((p.start(), p.end(), p.in_flight()), (20, 20, 0));
    }

    #[test]
    fn a_snapshot_keeps_decisions_and_counts_but_not_locks() {
        let mut p = SharePartition::new(0, limits());
        p.acquire("a", &[(0, 5)], 500, 0);
        p.acknowledge("a", 0, 0, &[ACCEPT], false, 0).unwrap();
        p.acknowledge("a", 2, 3, &[REJECT, ACCEPT], false, 0)
            .unwrap();
        let s = p.snapshot();
        assert_eq!(s.start, 1);
        assert_eq!(
            s.runs,
            vec![(1, 1, 0, 1), (2, 2, 4, 1), (3, 3, 2, 1), (4, 5, 0, 1)]
        );
        let mut q = SharePartition::restore(&s, limits());
        assert_eq!((q.start(), q.end()), (1, 6));
        // What was held is available again, counted as delivered once.
        assert_eq!(
            q.acquire("b", &[(0, 5), (6, 7)], 500, 0),
            vec![acq(1, 1, 2), acq(4, 5, 2), acq(6, 7, 1)]
        );
    }
}
