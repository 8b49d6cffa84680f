//! Gauges computed from the broker's state at scrape time: replica and controller counts,
//! partition offsets and sizes, consumer groups with their lag, share groups' records, and the transaction
//! coordinator's transactions. Nothing here is kept
//! between scrapes, so a deleted topic or group simply stops appearing.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, IntCounterVec, IntGauge, IntGaugeVec, Opts};

use crate::broker::Broker;
use crate::topics::Topic;

fn gauge(out: &mut Vec<MetricFamily>, name: &str, help: &str, value: i64) {
    let g = IntGauge::new(name, help).expect("valid metric");
    g.set(value);
    out.extend(g.collect());
}

/// A labelled gauge family filled by `fill`, skipped when it has no series.
fn gauge_vec(
    out: &mut Vec<MetricFamily>,
    name: &str,
    help: &str,
    labels: &[&str],
    fill: impl FnOnce(&IntGaugeVec),
) {
    let v = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    fill(&v);
    out.extend(
        v.collect()
            .into_iter()
            .filter(|f| !f.get_metric().is_empty()),
    );
}

pub fn families(broker: &Broker) -> Vec<MetricFamily> {
    let partition_series = broker.config.metrics_partition_series;
    let mut out = Vec::new();
    let topics = broker.catalog.all();
    replica_and_controller_gauges(&mut out, broker, &topics);
    partition_gauges(&mut out, &topics, partition_series);
    let hw: BTreeMap<(&str, i32), i64> = topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| ((t.name.as_str(), p.index), p.log.offsets().high_watermark))
        })
        .collect();
    group_gauges(&mut out, broker, &hw, partition_series);
    share_families(&mut out, broker);
    transaction_gauges(&mut out, broker);
    cleaner_gauges(&mut out, broker);
    quota_gauges(&mut out, broker);
    gauge(
        &mut out,
        "cairn_fetch_memory_held_bytes",
        "Bytes of fetched records held in memory until their responses are sent, and reserved by fetches reading",
        broker.fetch_memory.held() as i64,
    );
    gauge(
        &mut out,
        "cairn_fetch_memory_max_bytes",
        "The bound on fetched records held in memory (fetch.memory.max.bytes)",
        broker.fetch_memory.limit() as i64,
    );
    out
}

/// Clients a byte-rate or request quota applies to, under the names Kafka's JMX exporter
/// gives the `kafka.server:type=Produce|Fetch|Request,user=,client-id=` sensors: the byte
/// rate (for requests, `request-time`: percent of a thread) and the mean throttle (ms) over
/// the quota window. As in Kafka, a client appears once a quota of that kind applies to it,
/// tagged with the usage it shares ([`quotas::applying`]).
///
/// [`quotas::applying`]: crate::controller::quotas::applying
fn quota_gauges(out: &mut Vec<MetricFamily>, broker: &Broker) {
    use crate::broker::throttle::Kind;
    let measured = broker.throttles.measured(crate::clock::now_ms_unsigned());
    for (kind, prefix, rate, what, whose) in [
        (
            Kind::Produce,
            "kafka_server_produce",
            "byte_rate",
            "Bytes per second of produce requests",
            "produce requests",
        ),
        (
            Kind::Fetch,
            "kafka_server_fetch",
            "byte_rate",
            "Bytes per second of consumers' fetch responses",
            "consumers' fetch responses",
        ),
        (
            Kind::Request,
            "kafka_server_request",
            "request_time",
            "Thread time of requests, in percent of one thread,",
            "requests (request_percentage)",
        ),
    ] {
        let families = [
            (
                format!("{prefix}_{rate}"),
                format!("{what} of clients a quota applies to, by usage"),
            ),
            (
                format!("{prefix}_throttle_time"),
                format!("Mean throttle in ms of {whose} over the quota window, by usage"),
            ),
        ];
        for (i, (name, help)) in families.iter().enumerate() {
            let v =
                GaugeVec::new(Opts::new(name, help), &["user", "client_id"]).expect("valid metric");
            for m in measured.iter().filter(|m| m.kind == kind) {
                let value = if i == 0 { m.rate } else { m.throttle_time_ms };
                v.with_label_values(&[&m.user, &m.client_id]).set(value);
            }
            out.extend(
                v.collect()
                    .into_iter()
                    .filter(|f| !f.get_metric().is_empty()),
            );
        }
    }
}

/// The log cleaner, under the names Kafka's JMX exporter gives its `LogCleaner` and
/// `LogCleanerManager` gauges: the `max-` ones and the recopy percent are over each cleaner
/// thread's last pass, as Kafka's are.
fn cleaner_gauges(out: &mut Vec<MetricFamily>, broker: &Broker) {
    use std::sync::atomic::Ordering::Relaxed;
    let c = &broker.cleaner;
    let since = crate::clock::now_ms().saturating_sub(c.last_run_ms.load(Relaxed));
    for (name, help, value) in [
        (
            "kafka_log_logcleanermanager_max_dirty_percent",
            "The highest dirty ratio among compacted partitions at the cleaner's last look, in percent",
            c.max_dirty_percent.load(Relaxed),
        ),
        (
            "kafka_log_logcleanermanager_max_compaction_delay_secs",
            "How far past its max.compaction.lag.ms the most overdue compacted partition was at the cleaner's last look, in seconds",
            c.max_compaction_delay_secs.load(Relaxed),
        ),
        (
            "kafka_log_logcleanermanager_time_since_last_run_ms",
            "Milliseconds since the cleaner last looked for a partition to clean",
            since.max(0),
        ),
        (
            "kafka_log_logcleanermanager_uncleanable_partitions_count",
            "Compacted partitions whose last cleaning pass failed",
            c.uncleanable_count() as i64,
        ),
        (
            "kafka_log_logcleaner_dead_thread_count",
            "Log cleaner threads that died since the broker started (each is started again at once; above 0 means a bug, see the log)",
            c.dead_threads.load(Relaxed),
        ),
        (
            "kafka_log_logcleaner_max_clean_time_secs",
            "Seconds the longest of the cleaner threads' last passes took",
            c.max_clean_time_secs(),
        ),
        (
            "kafka_log_logcleaner_max_buffer_utilization_percent",
            "How full the fullest of the cleaner threads' last offset maps was (its share of log.cleaner.dedupe.buffer.size), in percent",
            c.max_buffer_utilization_percent(),
        ),
        (
            "kafka_log_logcleaner_cleaner_recopy_percent",
            "Bytes the cleaner threads' last passes kept per byte they read, in percent",
            c.recopy_percent(),
        ),
    ] {
        gauge(out, name, help, value);
    }
}

/// Share groups (KIP-932) on this broker, under the names Kafka's JMX exporter gives its
/// `SharePartitionMetrics` and `ShareGroupMetrics` (labels: group, topic, partition, ack
/// type), and the records acquired now and delivered again, which Kafka does not export.
fn share_families(out: &mut Vec<MetricFamily>, broker: &Broker) {
    let name = |id| broker.catalog.get_by_id(id).map(|t| t.name.clone());
    let gauges = broker.shares.gauges();
    for (family, help, acquired) in [
        (
            "kafka_server_sharepartitionmetrics_inflightmessagecount",
            "Records of the share partition in flight: acquired, or available again after a delivery",
            false,
        ),
        (
            "cairn_share_partition_acquired_records",
            "Records of the share partition held by a member now",
            true,
        ),
    ] {
        gauge_vec(out, family, help, &["group", "topic", "partition"], |v| {
            for g in &gauges {
                if let Some(topic) = name(g.tp.0) {
                    let n = if acquired { g.acquired } else { g.in_flight };
                    v.with_label_values(&[&g.group, &topic, &g.tp.1.to_string()])
                        .set(n as i64);
                }
            }
        });
    }
    let stats = broker.shares.stats();
    let acks = IntCounterVec::new(
        Opts::new(
            "kafka_server_sharegroupmetrics_recordacknowledgements_total",
            "Records acknowledged by share group members, by acknowledge type",
        ),
        &["group", "topic", "acktype"],
    )
    .expect("valid metric");
    let per_topic = |family: &str, help: &str| {
        IntCounterVec::new(Opts::new(family, help), &["group", "topic"]).expect("valid metric")
    };
    let timeouts = per_topic(
        "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total",
        "Records whose acquisition lock ran out before they were acknowledged",
    );
    let again = per_topic(
        "cairn_share_records_redelivered_total",
        "Records delivered to a share group member again (delivery count above 1)",
    );
    for (group, id, s) in &stats {
        let Some(topic) = name(*id) else { continue };
        for (kind, n) in [
            ("accept", s.accepted),
            ("release", s.released),
            ("reject", s.rejected),
            ("renew", s.renewed),
        ] {
            acks.with_label_values(&[group, &topic, kind]).inc_by(n);
        }
        timeouts
            .with_label_values(&[group, &topic])
            .inc_by(s.lock_timeouts);
        again
            .with_label_values(&[group, &topic])
            .inc_by(s.redelivered);
    }
    for f in [acks, timeouts, again] {
        out.extend(
            f.collect()
                .into_iter()
                .filter(|f| !f.get_metric().is_empty()),
        );
    }
}

/// The transaction coordinator: the ids it holds by state, every state listed (Kafka has no
/// such gauge; its coordinator's state is only visible through kafka-transactions.sh).
fn transaction_gauges(out: &mut Vec<MetricFamily>, broker: &Broker) {
    use crate::coordinator::transactions::TxnState;
    let counts = broker.txns.count_by_state();
    gauge_vec(
        out,
        "kafka_coordinator_transaction_transactions",
        "Transactional ids this broker coordinates, by state",
        &["state"],
        |v| {
            for s in [
                TxnState::Empty,
                TxnState::Ongoing,
                TxnState::PrepareCommit,
                TxnState::PrepareAbort,
                TxnState::CompleteCommit,
                TxnState::CompleteAbort,
                TxnState::PrepareEpochFence,
            ] {
                v.with_label_values(&[s.name()])
                    .set(counts.get(&s).copied().unwrap_or(0));
            }
        },
    );
}

/// This broker's replica counts (Kafka's ReplicaManager gauges), the controller-wide counts
/// and the broker state.
fn replica_and_controller_gauges(
    out: &mut Vec<MetricFamily>,
    broker: &Broker,
    topics: &[Arc<Topic>],
) {
    let node = broker.node_id();
    let (mut partitions, mut leaders, mut under_replicated, mut under_min_isr, mut at_min_isr) =
        (0, 0, 0, 0, 0);
    let mut offline = 0;
    for t in topics {
        let min_isr = t.effective.min_insync_replicas as usize;
        for p in &t.partitions {
            let place = p.placement();
            if place.replicas.contains(&node) {
                partitions += 1;
            }
            if place.leader < 0 {
                offline += 1;
            }
            if place.leader == node {
                leaders += 1;
                under_replicated += i64::from(place.isr.len() < place.replicas.len());
                under_min_isr += i64::from(place.isr.len() < min_isr);
                at_min_isr += i64::from(place.isr.len() == min_isr);
            }
        }
    }
    let global_partitions: usize = topics.iter().map(|t| t.partitions.len()).sum();
    // Controller-wide figures come from the active controller only (as in Kafka), so sums
    // over the cluster count each once; a single node is its own active controller.
    let active = broker.cluster().is_some_and(|c| c.controller.is_active());
    if let Some(c) = broker.cluster() {
        let counted = broker.metrics.unclean_leader_elections.get();
        let decided = c.controller.unclean_elections();
        if decided > counted {
            broker
                .metrics
                .unclean_leader_elections
                .inc_by(decided - counted);
        }
    }
    let only_active = |v: i64| if active { v } else { 0 };
    let brokers = broker
        .live_brokers(&broker.config.advertised_listeners[0].name)
        .len() as i64;
    for (name, help, value) in [
        (
            "kafka_server_replicamanager_partitioncount",
            "Partitions with a replica on this broker",
            partitions,
        ),
        (
            "kafka_server_replicamanager_leadercount",
            "Partitions this broker leads",
            leaders,
        ),
        (
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Led partitions whose ISR is smaller than their replica set",
            under_replicated,
        ),
        (
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Led partitions whose ISR is below min.insync.replicas",
            under_min_isr,
        ),
        (
            "kafka_server_replicamanager_atminisrpartitioncount",
            "Led partitions whose ISR is exactly min.insync.replicas",
            at_min_isr,
        ),
        (
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the active controller, else 0",
            only_active(1),
        ),
        (
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a live leader (active controller only)",
            only_active(offline),
        ),
        (
            "kafka_controller_kafkacontroller_globaltopiccount",
            "Topics in the cluster (active controller only)",
            only_active(topics.len() as i64),
        ),
        (
            "kafka_controller_kafkacontroller_globalpartitioncount",
            "Partitions in the cluster (active controller only)",
            only_active(global_partitions as i64),
        ),
        ("kafka_brokers", "Live brokers in the cluster", brokers),
        (
            "kafka_server_kafkaserver_brokerstate",
            "Kafka's BrokerState: 1 starting (in a cluster: not yet registered and unfenced in this incarnation), 3 running, 7 shutting down",
            broker_state(broker),
        ),
    ] {
        gauge(out, name, help, value);
    }
}

/// Partitions per topic, and per partition (unless switched off) its size, offsets and
/// replicas.
fn partition_gauges(out: &mut Vec<MetricFamily>, topics: &[Arc<Topic>], partition_series: bool) {
    gauge_vec(
        out,
        "kafka_topic_partitions",
        "Partitions of the topic",
        &["topic"],
        |v| {
            for t in topics {
                v.with_label_values(&[&t.name])
                    .set(t.partitions.len() as i64);
            }
        },
    );
    if partition_series {
        let per_partition =
            |out: &mut Vec<MetricFamily>,
             name: &str,
             help: &str,
             value: &dyn Fn(&crate::topics::Partition) -> i64| {
                gauge_vec(out, name, help, &["topic", "partition"], |v| {
                    for t in topics {
                        for p in &t.partitions {
                            v.with_label_values(&[&t.name, &p.index.to_string()])
                                .set(value(p));
                        }
                    }
                });
            };
        per_partition(
            out,
            "kafka_log_log_size",
            "Bytes of the partition's log on this broker",
            &|p| p.log.size_bytes() as i64,
        );
        per_partition(
            out,
            "kafka_topic_partition_current_offset",
            "The partition's high watermark (the next offset consumers will see)",
            &|p| p.log.offsets().high_watermark,
        );
        per_partition(
            out,
            "kafka_topic_partition_last_stable_offset",
            "The partition's last stable offset (LSO): read_committed consumers read up to it; \
             open transactions hold it below the high watermark",
            &|p| p.log.offsets().last_stable,
        );
        per_partition(
            out,
            "kafka_topic_partition_oldest_offset",
            "The partition's log start offset",
            &|p| p.log.offsets().log_start,
        );
        per_partition(
            out,
            "kafka_topic_partition_leader",
            "Node id of the partition's leader (-1: none)",
            &|p| p.placement().leader as i64,
        );
        per_partition(
            out,
            "kafka_topic_partition_in_sync_replica",
            "Replicas in the partition's ISR",
            &|p| p.placement().isr.len() as i64,
        );
        per_partition(
            out,
            "kafka_topic_partition_under_replicated_partition",
            "1 if the partition's ISR is smaller than its replica set",
            &|p| {
                let place = p.placement();
                i64::from(place.isr.len() < place.replicas.len())
            },
        );
    }
}

/// Consumer groups: members, committed offsets and lag = max(HW - committed, 0), for the
/// partitions that have a committed offset (kafka_exporter's definitions); `hw` holds each
/// partition's high watermark.
fn group_gauges(
    out: &mut Vec<MetricFamily>,
    broker: &Broker,
    hw: &BTreeMap<(&str, i32), i64>,
    partition_series: bool,
) {
    let groups = broker.groups.snapshot();
    gauge_vec(
        out,
        "kafka_consumergroup_members",
        "Members of the consumer group",
        &["consumergroup"],
        |v| {
            for g in &groups {
                v.with_label_values(&[&g.id]).set(g.members as i64);
            }
        },
    );
    let mut sums: BTreeMap<(&str, &str), (i64, i64)> = BTreeMap::new();
    let per_group_partition = |name: &str, help: &str| {
        IntGaugeVec::new(
            Opts::new(name, help),
            &["consumergroup", "topic", "partition"],
        )
        .expect("valid metric")
    };
    let current = per_group_partition(
        "kafka_consumergroup_current_offset",
        "The group's committed offset for the partition",
    );
    let lag = per_group_partition(
        "kafka_consumergroup_lag",
        "Records between the group's committed offset and the partition's high watermark",
    );
    for g in &groups {
        for (topic, partition, offset) in &g.offsets {
            // Offsets of deleted topics or partitions have no lag to report.
            let Some(&end) = hw.get(&(topic.as_str(), *partition)) else {
                continue;
            };
            let l = (end - offset).max(0);
            let s = sums.entry((&g.id, topic)).or_default();
            s.0 += offset;
            s.1 += l;
            if partition_series {
                let labels = [g.id.as_str(), topic.as_str(), &partition.to_string()];
                current.with_label_values(&labels).set(*offset);
                lag.with_label_values(&labels).set(l);
            }
        }
    }
    for f in [current, lag] {
        out.extend(
            f.collect()
                .into_iter()
                .filter(|f| !f.get_metric().is_empty()),
        );
    }
    for (i, (name, help)) in [
        (
            "kafka_consumergroup_current_offset_sum",
            "The group's committed offsets summed over the topic's partitions",
        ),
        (
            "kafka_consumergroup_lag_sum",
            "The group's lag summed over the topic's partitions",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        gauge_vec(out, name, help, &["consumergroup", "topic"], |v| {
            for ((g, t), (offsets, lag)) in &sums {
                v.with_label_values(&[g, t])
                    .set(if i == 0 { *offsets } else { *lag });
            }
        });
    }
}

/// Kafka's BrokerState codes for this broker.
fn broker_state(broker: &Broker) -> i64 {
    if broker.is_shutting_down() {
        7
    } else if !broker.is_ready() || broker.cluster().is_some_and(|c| !c.is_running()) {
        1
    } else {
        3
    }
}
