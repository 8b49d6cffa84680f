//! The topic catalog: topics, their stable UUIDs, partitions and config overrides, persisted
//! in the metadata store and held in memory as immutable snapshots (`Arc<Topic>`), replaced
//! whole on every change so readers never lock more than the map.
//!
//! The controller's image is the authority (on a single node too: a quorum of one), and
//! `replication` makes the catalog follow it (`adopt`, `forget`); each partition's
//! [`Replica`] holds its leader, ISR and epochs.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::log::writes::Writer;
use crate::log::PartitionLog;
use crate::metrics::{Metrics, TopicMetrics};
use crate::placement::{Placement, Replica};
use crate::storage::{LogStore, MetaStore, PartitionId};
use crate::topic_config::Effective;

/// The internal topic holding consumer groups and their committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The transaction coordinator's internal topic.
pub const TXN_TOPIC: &str = "__transaction_state";
/// The share coordinator's internal topic: share partitions' persisted state (KIP-932).
pub const SHARE_STATE_TOPIC: &str = "__share_group_state";

const TOPIC_PREFIX: &[u8] = b"topic/";
const NEXT_PARTITION_KEY: &[u8] = b"next_partition_id";

pub struct Partition {
    pub index: i32,
    pub leader_epoch: i32,
    /// Index into the catalog's log dirs (`log.dirs` order).
    pub dir: usize,
    pub log: PartitionLog,
    /// Leader, replicas, ISR and epochs, as the metadata image says.
    pub replica: Replica,
}

impl Partition {
    /// As the controller's partition record says (last applied); before that, no leader.
    pub fn placement(&self) -> Placement {
        // Under the lock, without cloning the followers' progress (every produce asks).
        match self.replica.lock().as_ref() {
            Some(a) => Placement {
                leader: a.leader,
                replicas: a.replicas.clone(),
                isr: a.isr.clone(),
                offline: a.offline.clone(),
                leader_epoch: a.leader_epoch,
            },
            None => Placement {
                leader: crate::controller::metadata::NO_LEADER,
                replicas: Vec::new(),
                isr: Vec::new(),
                offline: Vec::new(),
                leader_epoch: self.leader_epoch,
            },
        }
    }
}

/// One of `log.dirs` and the store in it.
#[derive(Clone)]
pub struct LogDir {
    pub path: PathBuf,
    /// Writes the appends of all the dir's partitions, several at a time, to its store.
    pub writer: Arc<Writer>,
}

impl LogDir {
    pub fn new(path: PathBuf, store: Arc<dyn LogStore>) -> LogDir {
        LogDir {
            path,
            writer: Writer::new(store),
        }
    }

    pub fn store(&self) -> &Arc<dyn LogStore> {
        self.writer.store()
    }
}

pub struct Topic {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<Arc<Partition>>,
    pub overrides: BTreeMap<String, String>,
    pub effective: Effective,
    pub metrics: TopicMetrics,
}

impl Topic {
    /// Kafka's internal topics (`__consumer_offsets`, `__transaction_state`,
    /// `__share_group_state`): written only by the broker.
    pub fn is_internal(&self) -> bool {
        self.name == OFFSETS_TOPIC || self.name == TXN_TOPIC || self.name == SHARE_STATE_TOPIC
    }

    /// Whether the log cleaner compacts the topic: its `cleanup.policy` includes `compact`,
    /// or it is a coordinators' topic, compacted whatever its config says (ones created
    /// before Cairn compacted have no cleanup.policy of their own).
    pub fn is_compacted(&self) -> bool {
        self.effective.compact || self.is_internal()
    }

    /// Gives each partition's log the topic's `segment.bytes` and `segment.ms`, which end
    /// its active segment (the part the cleaner leaves alone).
    fn apply_segment_limits(&self) {
        let e = &self.effective;
        for p in &self.partitions {
            p.log
                .set_segment_limits(e.segment_bytes as u64, e.segment_ms);
        }
    }

    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

#[derive(Serialize, Deserialize)]
struct StoredPartition {
    storage_id: PartitionId,
    leader_epoch: i32,
    /// The log dir holding the partition, as `log.dirs` names it; absent with a single dir
    /// (so a lone data dir can be moved), and then it is the first dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dir: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct StoredTopic {
    id: Uuid,
    partitions: Vec<StoredPartition>,
    configs: BTreeMap<String, String>,
}

/// The topics this broker holds, as the metadata image gave them (adopted and forgotten in
/// metadata order), with their partitions' logs; persisted so a restart opens the same
/// storage before the image is followed again.
pub struct Catalog {
    /// The broker's settings with the cluster's dynamic configs over them: the topics'
    /// defaults come from here.
    config: RwLock<Arc<Config>>,
    metrics: Arc<Metrics>,
    meta: Arc<dyn MetaStore>,
    dirs: Vec<LogDir>,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// Serialises catalog changes (adopt, forget) so each is one consistent step.
    changes: tokio::sync::Mutex<()>,
    /// Serialises config changes from read to write. IncrementalAlterConfigs reads a topic's
    /// overrides, applies its operations and writes the whole set back; two of them at once
    /// would both read the old set and the second write would drop the first one's keys.
    /// `changes` cannot cover this: the write goes through the controller. Only changes
    /// made through this broker are serialised: two brokers of a cluster changing one topic
    /// at once can still lose one change, because each sends the controller a whole set.
    pub config_changes: tokio::sync::Mutex<()>,
    /// Moves on every change to the set of topics (created, deleted, changed), so that what
    /// is derived from that set, such as the topics a regular expression matches, is
    /// recomputed only when it may differ.
    version: std::sync::atomic::AtomicU64,
}

/// Kafka's rule: 1..=249 characters of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidTopic("topic name is empty".into()));
    }
    if name == "." || name == ".." {
        return Err(Error::InvalidTopic(format!(
            "topic name cannot be '{name}'"
        )));
    }
    if name.len() > 249 {
        return Err(Error::InvalidTopic(format!(
            "topic name is {} characters; at most 249 are allowed",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(Error::InvalidTopic(format!(
            "topic name '{name}' contains '{c}'; only ASCII letters, digits, '.', '_' and '-' are allowed"
        )));
    }
    Ok(())
}

impl Catalog {
    /// Loads every topic and opens its partitions' logs (blocking; at start-up).
    pub fn open(
        config: Arc<Config>,
        meta: Arc<dyn MetaStore>,
        dirs: Vec<LogDir>,
        metrics: Arc<Metrics>,
    ) -> Result<Catalog> {
        assert!(!dirs.is_empty(), "at least one log dir");
        let mut topics = HashMap::new();
        for (key, value) in meta.scan_prefix(TOPIC_PREFIX)? {
            let name = String::from_utf8_lossy(&key[TOPIC_PREFIX.len()..]).into_owned();
            let stored: StoredTopic = serde_json::from_slice(&value)
                .map_err(|e| Error::Storage(format!("topic record {name} is malformed: {e}")))?;
            let topic = Self::materialize(&config, &metrics, &dirs, &name, &stored)?;
            topics.insert(name, Arc::new(topic));
        }
        Ok(Catalog {
            config: RwLock::new(config),
            metrics,
            meta,
            dirs,
            topics: RwLock::new(topics),
            changes: tokio::sync::Mutex::new(()),
            config_changes: tokio::sync::Mutex::new(()),
            version: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn materialize(
        config: &Config,
        metrics: &Metrics,
        dirs: &[LogDir],
        name: &str,
        stored: &StoredTopic,
    ) -> Result<Topic> {
        let partitions = stored
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| Self::open_partition(dirs, name, i, p))
            .collect::<Result<Vec<_>>>()?;
        let topic = Topic {
            name: name.to_string(),
            id: stored.id,
            partitions,
            effective: Effective::resolve(&stored.configs, config),
            overrides: stored.configs.clone(),
            metrics: metrics.topic(name),
        };
        topic.apply_segment_limits();
        Ok(topic)
    }

    fn open_partition(
        dirs: &[LogDir],
        topic: &str,
        index: usize,
        p: &StoredPartition,
    ) -> Result<Arc<Partition>> {
        let dir = match &p.dir {
            None => 0,
            Some(path) => dirs
                .iter()
                .position(|d| d.path.as_path() == std::path::Path::new(path))
                .ok_or_else(|| {
                    Error::Storage(format!(
                        "partition {index} of topic {topic} is in log dir {path}, which log.dirs no longer lists"
                    ))
                })?,
        };
        Ok(Arc::new(Partition {
            index: index as i32,
            leader_epoch: p.leader_epoch,
            dir,
            log: PartitionLog::open_with(p.storage_id, dirs[dir].writer.clone(), p.leader_epoch)?,
            replica: Default::default(),
        }))
    }

    /// The log dirs, in `log.dirs` order.
    pub fn dirs(&self) -> &[LogDir] {
        &self.dirs
    }

    /// Where `n` new partitions go: each to the dir holding the fewest partitions, as
    /// Kafka places new replicas.
    fn place(&self, n: usize) -> Vec<usize> {
        let mut counts = vec![0usize; self.dirs.len()];
        for t in self.all() {
            for p in &t.partitions {
                counts[p.dir] += 1;
            }
        }
        (0..n)
            .map(|_| {
                let (dir, _) = counts
                    .iter()
                    .enumerate()
                    .min_by_key(|(i, c)| (**c, *i))
                    .expect("at least one log dir");
                counts[dir] += 1;
                dir
            })
            .collect()
    }

    fn stored_dir(&self, dir: usize) -> Option<String> {
        (self.dirs.len() > 1).then(|| self.dirs[dir].path.display().to_string())
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// A partition by topic name and index, or UNKNOWN_TOPIC_OR_PARTITION.
    pub fn partition(&self, name: &str, index: i32) -> Result<(Arc<Topic>, Arc<Partition>)> {
        let topic = self.get(name).ok_or(Error::UnknownTopicOrPartition)?;
        let partition = topic
            .partition(index)
            .cloned()
            .ok_or(Error::UnknownTopicOrPartition)?;
        Ok((topic, partition))
    }

    pub fn get_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .find(|t| t.id == id)
            .cloned()
    }

    /// The version of the set of topics: it moves whenever a topic is created, changed or
    /// deleted.
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Every topic's name, in no order.
    pub fn names(&self) -> Vec<String> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Every topic, sorted by name.
    pub fn all(&self) -> Vec<Arc<Topic>> {
        let mut v: Vec<_> = self
            .topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The broker's settings in force: the static ones with the dynamic ones over them.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes the cluster's dynamic broker configs (`cluster`: its defaults; `broker`:
    /// this broker's own) over the static settings, and resolves every topic's settings
    /// again. Cheap when nothing changed; a set the broker cannot read is logged and left
    /// out (the controller only takes sets a broker checked).
    pub async fn reconfigure(
        &self,
        cluster: BTreeMap<String, String>,
        broker: BTreeMap<String, String>,
    ) {
        let current = self.config();
        if current.layers.cluster == cluster && current.layers.broker == broker {
            return;
        }
        let next = match current.with_dynamic(cluster, broker) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                tracing::error!(error = %e, "dynamic broker configs not applied");
                return;
            }
        };
        let _change = self.changes.lock().await;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = next.clone();
        for t in self.all() {
            let topic = Topic {
                name: t.name.clone(),
                id: t.id,
                partitions: t.partitions.clone(),
                overrides: t.overrides.clone(),
                effective: Effective::resolve(&t.overrides, &next),
                metrics: t.metrics.clone(),
            };
            if topic.effective != t.effective {
                topic.apply_segment_limits();
                self.replace(topic);
            }
        }
        tracing::info!(cluster = ?next.layers.cluster, broker = ?next.layers.broker, "dynamic broker configs applied");
    }

    /// Makes the local catalog hold topic `name` as the cluster metadata has it: id `id`,
    /// `partitions` partitions, `configs`. A local topic of that name with another id is an
    /// older incarnation and goes first. Cheap when nothing changed.
    pub async fn adopt(
        &self,
        name: &str,
        id: Uuid,
        partitions: usize,
        configs: &BTreeMap<String, String>,
    ) -> Result<Arc<Topic>> {
        if let Some(t) = self.get(name) {
            if t.id == id && t.partitions.len() >= partitions && t.overrides == *configs {
                return Ok(t);
            }
        }
        let _change = self.changes.lock().await;
        let existing = self.get(name);
        if let Some(t) = existing.as_ref().filter(|t| t.id != id) {
            self.forget_locked(t).await?;
        }
        let mut stored = match self.get(name) {
            Some(t) => self.stored(&t),
            None => StoredTopic {
                id,
                partitions: Vec::new(),
                configs: configs.clone(),
            },
        };
        stored.configs = configs.clone();
        let current = stored.partitions.len();
        if partitions > current {
            let first = self
                .allocate_partition_ids((partitions - current) as u32)
                .await?;
            for (dir, i) in self.place(partitions - current).into_iter().zip(0..) {
                stored.partitions.push(StoredPartition {
                    storage_id: first + i,
                    leader_epoch: 0,
                    dir: self.stored_dir(dir),
                });
            }
        }
        self.persist(name, &stored).await?;
        let mut parts: Vec<Arc<Partition>> = self
            .get(name)
            .map(|t| t.partitions.clone())
            .unwrap_or_default();
        for (i, p) in stored.partitions.iter().enumerate().skip(parts.len()) {
            parts.push(Self::open_partition(&self.dirs, name, i, p)?);
        }
        let topic = Topic {
            name: name.to_string(),
            id,
            partitions: parts,
            effective: Effective::resolve(configs, &self.config()),
            overrides: configs.clone(),
            metrics: self.metrics.topic(name),
        };
        topic.apply_segment_limits();
        self.replace(topic);
        tracing::info!(topic = name, partitions, %id, "topic in the cluster metadata");
        self.get(name).ok_or(Error::UnknownTopicOrPartition)
    }

    /// Removes a topic the cluster metadata no longer has (whatever delete.topic.enable says:
    /// the controller decided).
    pub async fn forget(&self, name: &str) -> Result<()> {
        let _change = self.changes.lock().await;
        match self.get(name) {
            Some(t) => self.forget_locked(&t).await,
            None => Ok(()),
        }
    }

    /// Removes the topic's record, then the topic, then (in the background) its data.
    async fn forget_locked(&self, topic: &Topic) -> Result<()> {
        let key = topic_key(&topic.name);
        self.meta_write(move |m| m.delete(&key)).await?;
        self.topics
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&topic.name);
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.metrics.forget_topic(&topic.name);
        let doomed: Vec<(Arc<dyn LogStore>, PartitionId)> = topic
            .partitions
            .iter()
            .map(|p| (self.dirs[p.dir].store().clone(), p.log.id))
            .collect();
        tokio::task::spawn_blocking(move || {
            for (logs, id) in doomed {
                if let Err(e) = logs.delete_partition(id) {
                    tracing::warn!(partition = id, error = %e, "could not remove a deleted topic's data");
                }
            }
        });
        tracing::info!(topic = %topic.name, "removed topic");
        Ok(())
    }

    fn stored(&self, topic: &Topic) -> StoredTopic {
        StoredTopic {
            id: topic.id,
            partitions: topic
                .partitions
                .iter()
                .map(|p| StoredPartition {
                    storage_id: p.log.id,
                    leader_epoch: p.leader_epoch,
                    dir: self.stored_dir(p.dir),
                })
                .collect(),
            configs: topic.overrides.clone(),
        }
    }

    fn replace(&self, topic: Topic) {
        self.topics
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(topic.name.clone(), Arc::new(topic));
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    async fn persist(&self, name: &str, stored: &StoredTopic) -> Result<()> {
        let value = serde_json::to_vec(stored)
            .map_err(|e| Error::Storage(format!("cannot encode topic {name}: {e}")))?;
        let key = topic_key(name);
        self.meta_write(move |m| m.put(&key, &value)).await
    }

    /// Runs a metadata write (synced: a topic change must survive a crash once answered)
    /// on the blocking pool, so an fsync never stalls a runtime worker and the requests
    /// queued behind it.
    async fn meta_write<T: Send + 'static>(
        &self,
        write: impl FnOnce(&dyn MetaStore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let meta = self.meta.clone();
        tokio::task::spawn_blocking(move || write(meta.as_ref()))
            .await
            .map_err(|e| Error::Storage(format!("metadata write did not finish: {e}")))?
    }

    /// Reserves `n` storage ids durably before any is used.
    async fn allocate_partition_ids(&self, n: u32) -> Result<PartitionId> {
        let first = self
            .meta_write(move |m| crate::storage::reserve::<4>(m, NEXT_PARTITION_KEY, n.into()))
            .await?;
        // reserve keeps a 4-byte counter below 2^32.
        Ok(first as PartitionId)
    }
}

fn topic_key(name: &str) -> Vec<u8> {
    let mut k = TOPIC_PREFIX.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStore;

    fn catalog(store: &Arc<MemoryStore>) -> Catalog {
        let config = Arc::new(Config::load(None, Vec::new(), &[]).unwrap());
        let dirs = vec![LogDir::new(config.log_dirs[0].clone(), store.clone())];
        Catalog::open(config, store.clone(), dirs, Arc::new(Metrics::new(&[]))).unwrap()
    }

    #[tokio::test]
    async fn adopted_topics_persist_with_stable_storage() {
        let store = Arc::new(MemoryStore::default());
        let c = catalog(&store);
        let id = Uuid::new_v4();
        let none = BTreeMap::new();
        c.adopt("orders", id, 3, &none).await.unwrap();
        // Grown and reconfigured by later images: the first partitions keep their storage.
        let cfg = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        c.adopt("orders", id, 5, &cfg).await.unwrap();
        let c2 = catalog(&store);
        let t2 = c2.get("orders").unwrap();
        assert_eq!(t2.id, id);
        assert_eq!(t2.partitions.len(), 5);
        assert_eq!(t2.effective.retention_ms, 1000);
        let ids: Vec<_> = t2.partitions.iter().map(|p| p.log.id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        c2.forget("orders").await.unwrap();
        assert!(catalog(&store).get("orders").is_none());
        // Recreated under the same name (a new id): fresh storage ids.
        let t3 = c2.adopt("orders", Uuid::new_v4(), 1, &none).await.unwrap();
        assert_ne!(t3.id, id);
        assert_eq!(t3.partitions[0].log.id, 5);
        // A topic of the same name under another id replaces the old one.
        let t4 = c2.adopt("orders", Uuid::new_v4(), 1, &none).await.unwrap();
        assert_eq!(t4.partitions[0].log.id, 6);
        assert_eq!(c2.all().len(), 1);
    }

    #[test]
    fn topic_names_follow_kafkas_rule() {
        for ok in ["a", "a.b", "a_b-C9", &"x".repeat(249)] {
            assert!(validate_topic_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a b", "a/b", &"x".repeat(250)] {
            assert!(
                matches!(validate_topic_name(bad), Err(Error::InvalidTopic(_))),
                "{bad}"
            );
        }
    }
}
