//! An in-memory [`LogStore`] and [`MetaStore`] for unit tests of the logic above storage.
//! It keeps the same contract as the RocksDB store (the conformance tests prove it); nothing
//! in it is durable, so integration tests never use it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use bytes::Bytes;

use super::{
    AbortedTxn, Append, BatchMeta, GroupCf, GroupChange, GroupStore, LogStore, MetaStore,
    PartitionId,
};
use crate::error::Result;

#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    batches: BTreeMap<(PartitionId, i64), (BatchMeta, Bytes)>,
    producers: BTreeMap<(PartitionId, i64), Bytes>,
    epochs: BTreeMap<(PartitionId, i32), i64>,
    starts: BTreeMap<PartitionId, i64>,
    cleaned: BTreeMap<PartitionId, i64>,
    /// (partition, marker offset) -> entry
    aborted: BTreeMap<(PartitionId, i64), AbortedTxn>,
    meta: BTreeMap<Vec<u8>, Vec<u8>>,
    groups: BTreeMap<(GroupCf, Vec<u8>), Vec<u8>>,
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock only happens in a failing test; keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Base offset of the batch holding `offset`, or of the first batch after it.
    fn first_holding(&self, p: PartitionId, offset: i64) -> Option<i64> {
        let offset = offset.max(0);
        if let Some((_, (m, _))) = self.batches.range((p, 0)..=(p, offset)).next_back() {
            if m.last_offset >= offset {
                return Some(m.base_offset);
            }
        }
        self.batches
            .range((p, offset.saturating_add(1))..(p, i64::MAX))
            .next()
            .map(|(_, (m, _))| m.base_offset)
    }
}

impl LogStore for MemoryStore {
    fn append_now(&self, appends: &[Append]) -> Result<bool> {
        self.append(appends, false).map(|()| true)
    }

    fn append(&self, appends: &[Append], _durable: bool) -> Result<()> {
        let mut g = self.lock();
        for a in appends {
            g.batches
                .insert((a.partition, a.meta.base_offset), (a.meta, a.batch.clone()));
            if let Some((pid, state)) = &a.producer {
                g.producers.insert((a.partition, *pid), state.clone());
            }
            if let Some((epoch, start)) = a.epoch_start {
                g.epochs.insert((a.partition, epoch), start);
            }
            if let Some(t) = a.aborted {
                g.aborted.insert((a.partition, t.last_offset), t);
            }
        }
        Ok(())
    }

    fn read_batches(
        &self,
        p: PartitionId,
        from_offset: i64,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>> {
        let g = self.lock();
        let Some(first) = g.first_holding(p, from_offset) else {
            return Ok(Vec::new());
        };
        let (mut out, mut read) = (Vec::new(), 0);
        for (_, (_, b)) in g.batches.range((p, first)..(p, i64::MAX)) {
            if read > 0 && read + b.len() > max_bytes {
                break;
            }
            read += b.len();
            out.push(b.clone());
            if read >= max_bytes {
                break;
            }
        }
        Ok(out)
    }

    fn scan_batches(
        &self,
        p: PartitionId,
        from_offset: i64,
        f: &mut dyn FnMut(&BatchMeta) -> bool,
    ) -> Result<()> {
        let g = self.lock();
        let Some(first) = g.first_holding(p, from_offset) else {
            return Ok(());
        };
        for (_, (m, _)) in g.batches.range((p, first)..(p, i64::MAX)) {
            if !f(m) {
                break;
            }
        }
        Ok(())
    }

    fn last_batch(&self, p: PartitionId) -> Result<Option<BatchMeta>> {
        let g = self.lock();
        Ok(g.batches
            .range((p, 0)..(p, i64::MAX))
            .next_back()
            .map(|(_, (m, _))| *m))
    }

    fn replace_batches(
        &self,
        p: PartitionId,
        rewritten: &[(BatchMeta, Bytes)],
        removed: &[i64],
        unindexed: &[i64],
        cleaned_to: i64,
    ) -> Result<()> {
        let mut g = self.lock();
        for (m, b) in rewritten {
            g.batches.insert((p, m.base_offset), (*m, b.clone()));
        }
        for base in removed {
            g.batches.remove(&(p, *base));
        }
        for marker in unindexed {
            g.aborted.remove(&(p, *marker));
        }
        g.cleaned.insert(p, cleaned_to);
        Ok(())
    }

    fn cleaned_to(&self, p: PartitionId) -> Result<Option<i64>> {
        Ok(self.lock().cleaned.get(&p).copied())
    }

    fn truncate_prefix(&self, p: PartitionId, log_start: i64) -> Result<()> {
        let mut g = self.lock();
        let doomed: Vec<_> = g
            .batches
            .range((p, 0)..(p, i64::MAX))
            .filter(|(_, (m, _))| m.last_offset < log_start)
            .map(|(k, _)| *k)
            .collect();
        for k in doomed {
            g.batches.remove(&k);
        }
        g.aborted
            .retain(|(q, marker), _| *q != p || *marker >= log_start);
        g.starts.insert(p, log_start);
        Ok(())
    }

    fn truncate_suffix(
        &self,
        p: PartitionId,
        end: i64,
        producers: &[(i64, Option<Bytes>)],
    ) -> Result<()> {
        let mut g = self.lock();
        g.batches.retain(|(q, base), _| *q != p || *base < end);
        g.epochs.retain(|(q, _), start| *q != p || *start < end);
        g.aborted.retain(|(q, marker), _| *q != p || *marker < end);
        for (pid, state) in producers {
            match state {
                Some(s) => g.producers.insert((p, *pid), s.clone()),
                None => g.producers.remove(&(p, *pid)),
            };
        }
        Ok(())
    }

    fn log_start(&self, p: PartitionId) -> Result<Option<i64>> {
        Ok(self.lock().starts.get(&p).copied())
    }

    fn delete_partition(&self, p: PartitionId) -> Result<()> {
        let mut g = self.lock();
        g.batches.retain(|(q, _), _| *q != p);
        g.producers.retain(|(q, _), _| *q != p);
        g.epochs.retain(|(q, _), _| *q != p);
        g.aborted.retain(|(q, _), _| *q != p);
        g.starts.remove(&p);
        g.cleaned.remove(&p);
        Ok(())
    }

    fn remove_producers(&self, p: PartitionId, producers: &[i64]) -> Result<()> {
        let mut g = self.lock();
        for pid in producers {
            g.producers.remove(&(p, *pid));
        }
        Ok(())
    }

    fn producer_states(&self, p: PartitionId) -> Result<Vec<(i64, Bytes)>> {
        let g = self.lock();
        Ok(g.producers
            .range((p, i64::MIN)..(p, i64::MAX))
            .map(|((_, id), s)| (*id, s.clone()))
            .collect())
    }

    fn epochs(&self, p: PartitionId) -> Result<Vec<(i32, i64)>> {
        let g = self.lock();
        Ok(g.epochs
            .range((p, i32::MIN)..(p, i32::MAX))
            .map(|((_, e), s)| (*e, *s))
            .collect())
    }

    fn aborted_txns(&self, p: PartitionId) -> Result<Vec<AbortedTxn>> {
        let g = self.lock();
        Ok(g.aborted
            .range((p, i64::MIN)..(p, i64::MAX))
            .map(|(_, t)| *t)
            .collect())
    }
}

impl MetaStore for MemoryStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.lock().meta.get(key).cloned())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.lock().meta.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.lock().meta.remove(key);
        Ok(())
    }

    fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let g = self.lock();
        Ok(g.meta
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

impl GroupStore for MemoryStore {
    fn write_groups(&self, changes: &[GroupChange]) -> Result<()> {
        let mut inner = self.lock();
        for c in changes {
            let key = (c.cf, c.key.clone());
            match &c.value {
                Some(v) => inner.groups.insert(key, v.clone()),
                None => inner.groups.remove(&key),
            };
        }
        Ok(())
    }

    fn load_groups(&self, cf: GroupCf) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let inner = self.lock();
        Ok(inner
            .groups
            .iter()
            .filter(|((c, _), _)| *c == cf)
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_store_keeps_the_contract() {
        let s = super::MemoryStore::default();
        super::super::conformance::log_store_contract(&s);
        super::super::conformance::meta_store_contract(&s);
        super::super::conformance::group_store_contract(&s);
    }
}
