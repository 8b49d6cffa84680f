//! Prometheus metrics under the names operators' dashboards and alert rules already query:
//! Strimzi's JMX-exporter names for broker metrics (`kafka_server_brokertopicmetrics_*`,
//! `kafka_server_replicamanager_*`, `kafka_controller_kafkacontroller_*`, ...) and
//! kafka_exporter's for offsets and consumer lag, plus a real latency histogram per API.
//!
//! Counters are updated where the work happens, through handles created once (per API at
//! start, per topic when the topic is loaded), so the hot path never looks a label up.
//! Gauges of state (partitions, offsets, sizes, groups, lag) are computed from the catalog
//! and the coordinator when scraped, by `crate::scrape` above, and handed to [`Metrics::render`]:
//! this module holds counter handles only and knows nothing of the layers that use them.

pub mod errors;

use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use errors::ErrorCodes;

/// Request latency buckets, in seconds: 0.5 ms to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

pub struct Metrics {
    registry: Registry,
    /// Indexed by api key; `None` for APIs Cairn does not serve.
    apis: Vec<Option<ApiMetrics>>,
    request_errors: IntCounterVec,
    connections: IntGaugeVec,
    connections_created: IntCounterVec,
    authentications: IntCounterVec,
    failed_authentications: IntCounterVec,
    reauthentications: IntCounterVec,
    failed_reauthentications: IntCounterVec,
    expired_sessions: IntCounterVec,
    topics: TopicFamilies,
    pub isr_shrinks: IntCounter,
    pub isr_expands: IntCounter,
    pub unclean_leader_elections: IntCounter,
    /// Bytes the log cleaner's passes read and wrote back.
    pub cleaner_bytes_read: IntCounter,
    pub cleaner_bytes_written: IntCounter,
}

struct ApiMetrics {
    name: String,
    min_version: i16,
    duration: Histogram,
    /// Indexed by version - min_version.
    by_version: Vec<IntCounter>,
}

struct TopicFamilies {
    messages_in: IntCounterVec,
    bytes_in: IntCounterVec,
    bytes_out: IntCounterVec,
    produce_requests: IntCounterVec,
    failed_produce_requests: IntCounterVec,
    fetch_requests: IntCounterVec,
    failed_fetch_requests: IntCounterVec,
}

/// One topic's counters, held by the topic so produce and fetch bump them directly.
#[derive(Clone)]
pub struct TopicMetrics {
    pub messages_in: IntCounter,
    pub bytes_in: IntCounter,
    pub bytes_out: IntCounter,
    pub produce_requests: IntCounter,
    pub failed_produce_requests: IntCounter,
    pub fetch_requests: IntCounter,
    pub failed_fetch_requests: IntCounter,
}

/// Connections open on one listener; the gauge goes down when this is dropped.
pub struct ConnectionGuard(IntGauge);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let v = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(v.clone()))
        .expect("unique metric");
    v
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric");
    registry
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

impl Metrics {
    /// Registers every family; `apis` is the dispatch table (key, min, max version).
    pub fn new(apis: &[(ApiKey, i16, i16)]) -> Metrics {
        let registry = Registry::new();
        let durations = HistogramVec::new(
            HistogramOpts::new(
                "kafka_network_request_duration_seconds",
                "Time from a request's arrival to its response being ready, by API",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["request"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(durations.clone()))
            .expect("unique metric");
        let requests = counter_vec(
            &registry,
            "kafka_network_requests_total",
            "Requests handled, by API and version",
            &["request", "version"],
        );
        let mut by_key: Vec<Option<ApiMetrics>> = Vec::new();
        for &(api, min, max) in apis {
            let key = api as i16 as usize;
            if by_key.len() <= key {
                by_key.resize_with(key + 1, || None);
            }
            let name = format!("{api:?}");
            by_key[key] = Some(ApiMetrics {
                duration: durations.with_label_values(&[&name]),
                by_version: (min..=max)
                    .map(|v| requests.with_label_values(&[&name, &v.to_string()]))
                    .collect(),
                min_version: min,
                name,
            });
        }
        let topic = |name: &str, help: &str| counter_vec(&registry, name, help, &["topic"]);
        let topics = TopicFamilies {
            messages_in: topic(
                "kafka_server_brokertopicmetrics_messagesin_total",
                "Records appended, by topic",
            ),
            bytes_in: topic(
                "kafka_server_brokertopicmetrics_bytesin_total",
                "Record batch bytes appended, by topic",
            ),
            bytes_out: topic(
                "kafka_server_brokertopicmetrics_bytesout_total",
                "Record batch bytes sent to fetchers, by topic",
            ),
            produce_requests: topic(
                "kafka_server_brokertopicmetrics_totalproducerequests_total",
                "Produce requests for a partition of the topic",
            ),
            failed_produce_requests: topic(
                "kafka_server_brokertopicmetrics_failedproducerequests_total",
                "Produce requests for a partition of the topic that failed",
            ),
            fetch_requests: topic(
                "kafka_server_brokertopicmetrics_totalfetchrequests_total",
                "Fetch requests for a partition of the topic",
            ),
            failed_fetch_requests: topic(
                "kafka_server_brokertopicmetrics_failedfetchrequests_total",
                "Fetch requests for a partition of the topic that failed",
            ),
        };
        let connections = IntGaugeVec::new(
            Opts::new(
                "kafka_server_socket_server_metrics_connection_count",
                "Open client connections, by listener",
            ),
            &["listener"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(connections.clone()))
            .expect("unique metric");
        let build = IntGaugeVec::new(
            Opts::new("cairn_build_info", "Always 1; labels name the build"),
            &["version", "revision"],
        )
        .expect("valid metric");
        build
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                option_env!("CAIRN_GIT_REVISION").unwrap_or("unknown"),
            ])
            .set(1);
        registry.register(Box::new(build)).expect("unique metric");
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("unique metric");
        Metrics {
            request_errors: counter_vec(
                &registry,
                "kafka_network_request_errors_total",
                "Error codes in responses, by API and Kafka error name",
                &["request", "error"],
            ),
            connections_created: counter_vec(
                &registry,
                "kafka_server_socket_server_metrics_connection_creation_total",
                "Client connections accepted, by listener",
                &["listener"],
            ),
            authentications: counter_vec(
                &registry,
                "kafka_server_socket_server_metrics_successful_authentication_total",
                "Connections that authenticated (by TLS handshake or SASL; PLAINTEXT ones on accept), by listener",
                &["listener"],
            ),
            failed_authentications: counter_vec(
                &registry,
                "kafka_server_socket_server_metrics_failed_authentication_total",
                "Connections closed because they failed to authenticate (TLS handshake or SASL), by listener",
                &["listener"],
            ),
            reauthentications: counter_vec(
                &registry,
                "kafka_server_socket_server_metrics_successful_reauthentication_total",
                "SASL sessions that re-authenticated (KIP-368), by listener",
                &["listener"],
            ),
            failed_reauthentications: counter_vec(
                &registry,
                "kafka_server_socket_server_metrics_failed_reauthentication_total",
                "Connections closed because their SASL re-authentication failed, by listener",
                &["listener"],
            ),
            expired_sessions: counter_vec(
                &registry,
                "kafka_server_socket_server_metrics_expired_connections_killed_count",
                "Connections closed because their SASL session expired before the client re-authenticated, by listener",
                &["listener"],
            ),
            isr_shrinks: counter(
                &registry,
                "kafka_server_replicamanager_isrshrinks_total",
                "Times a partition's ISR shrank on this broker",
            ),
            isr_expands: counter(
                &registry,
                "kafka_server_replicamanager_isrexpands_total",
                "Times a partition's ISR grew on this broker",
            ),
            unclean_leader_elections: counter(
                &registry,
                "kafka_controller_controllerstats_uncleanleaderelections_total",
                "Leaders elected from outside the ISR",
            ),
            cleaner_bytes_read: counter(
                &registry,
                "kafka_log_logcleaner_read_bytes_total",
                "Bytes the log cleaner's passes read from compacted partitions",
            ),
            cleaner_bytes_written: counter(
                &registry,
                "kafka_log_logcleaner_written_bytes_total",
                "Bytes the log cleaner's passes kept of what they read",
            ),
            apis: by_key,
            connections,
            topics,
            registry,
        }
    }

    /// The counters of `topic` (created at zero, so a topic shows up before traffic).
    pub fn topic(&self, topic: &str) -> TopicMetrics {
        let f = &self.topics;
        let l = &[topic];
        TopicMetrics {
            messages_in: f.messages_in.with_label_values(l),
            bytes_in: f.bytes_in.with_label_values(l),
            bytes_out: f.bytes_out.with_label_values(l),
            produce_requests: f.produce_requests.with_label_values(l),
            failed_produce_requests: f.failed_produce_requests.with_label_values(l),
            fetch_requests: f.fetch_requests.with_label_values(l),
            failed_fetch_requests: f.failed_fetch_requests.with_label_values(l),
        }
    }

    /// Drops a deleted topic's series.
    pub fn forget_topic(&self, topic: &str) {
        let f = &self.topics;
        for v in [
            &f.messages_in,
            &f.bytes_in,
            &f.bytes_out,
            &f.produce_requests,
            &f.failed_produce_requests,
            &f.fetch_requests,
            &f.failed_fetch_requests,
        ] {
            let _ = v.remove_label_values(&[topic]);
        }
    }

    /// Records one handled request: its latency, its version and the errors in its answer.
    pub fn request(
        &self,
        api: ApiKey,
        version: i16,
        elapsed: Duration,
        response: Option<&dyn ErrorCodes>,
    ) {
        let Some(Some(m)) = self.apis.get(api as i16 as usize) else {
            return;
        };
        m.duration.observe(elapsed.as_secs_f64());
        if let Some(c) = m.by_version.get((version - m.min_version) as usize) {
            c.inc();
        }
        if let Some(r) = response {
            r.error_codes(&mut |code| {
                if code != 0 {
                    self.request_errors
                        .with_label_values(&[&m.name, &errors::name(code)])
                        .inc();
                }
            });
        }
    }

    /// Counts a new connection on `listener`; the returned guard counts it closed.
    pub fn connection_opened(&self, listener: &str) -> ConnectionGuard {
        self.connections_created
            .with_label_values(&[listener])
            .inc();
        let g = self.connections.with_label_values(&[listener]);
        g.inc();
        ConnectionGuard(g)
    }

    /// Counts a connection on `listener` that authenticated, or failed to.
    pub fn authenticated(&self, listener: &str, ok: bool) {
        let counter = if ok {
            &self.authentications
        } else {
            &self.failed_authentications
        };
        counter.with_label_values(&[listener]).inc();
    }

    /// Counts a SASL login on `listener` that succeeded or failed: a first authentication,
    /// or (`again`) a re-authentication, which Kafka counts apart.
    pub fn sasl_login(&self, listener: &str, again: bool, ok: bool) {
        let counter = match (again, ok) {
            (false, _) => return self.authenticated(listener, ok),
            (true, true) => &self.reauthentications,
            (true, false) => &self.failed_reauthentications,
        };
        counter.with_label_values(&[listener]).inc();
    }

    /// Counts a connection on `listener` closed because its SASL session expired.
    pub fn session_expired(&self, listener: &str) {
        self.expired_sessions.with_label_values(&[listener]).inc();
    }

    /// Makes a listener's series exist at zero before its first connection.
    pub fn listener_bound(&self, listener: &str) {
        self.connections.with_label_values(&[listener]);
        self.connections_created.with_label_values(&[listener]);
        self.authentications.with_label_values(&[listener]);
        self.failed_authentications.with_label_values(&[listener]);
        self.reauthentications.with_label_values(&[listener]);
        self.failed_reauthentications.with_label_values(&[listener]);
        self.expired_sessions.with_label_values(&[listener]);
    }

    /// The Prometheus text exposition: the registered families plus `computed` ones.
    pub fn render(&self, computed: Vec<prometheus::proto::MetricFamily>) -> String {
        let mut families = self.registry.gather();
        families.extend(computed);
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}
