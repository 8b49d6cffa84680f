//! Observability against real processes: the `/metrics`, `/health` and `/ready` endpoints of
//! a running broker after real traffic (values, not just names, and `promtool check metrics`);
//! the Grafana dashboards and alert rules parsed as PromQL and checked against the names the
//! broker exports; the alert rules' own unit tests under promtool; docker-compose.yml
//! validated against the compose spec; and the compose topology run as processes, with a real
//! Prometheus scraping Cairn, evaluating the rules and answering every dashboard query.
//!
//! Needs promtool, prometheus, kcat and check-jsonschema: `scripts/install-deps.sh test`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{batch, free_port, http_get, name, try_http_get, Broker, Client};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A tool the test needs; a clear failure (not a skip) when it is missing.
fn tool(name: &str) -> PathBuf {
    if name == "check-jsonschema" {
        let dir = std::env::var_os("CAIRN_TOOLS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/cairn-tools")
            });
        let p = dir.join("bin/check-jsonschema");
        assert!(
            p.exists(),
            "{} is missing: run scripts/install-deps.sh test",
            p.display()
        );
        return p;
    }
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.exists());
    found.unwrap_or_else(|| panic!("{name} is missing: run scripts/install-deps.sh test"))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---- HTTP, by hand: GET with HTTP/1.0 and read to the end --------------------------------

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `check` until it returns Some, for at most `secs` (a liveness bound, not a timing
/// assertion: on a loaded machine it only has to happen eventually).
fn eventually<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

// ---- the Prometheus text format -------------------------------------------------------------

#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                let mut labels = BTreeMap::new();
                // Label values here never contain '",' (topic and group names are simple).
                for pair in body.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").expect("label");
                    labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
                }
                (n.to_string(), labels)
            }
            None => (series.to_string(), BTreeMap::new()),
        };
        out.push(Sample {
            name,
            labels,
            value: value.parse().unwrap_or(f64::NAN),
        });
    }
    out
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

fn scrape(addr: SocketAddr) -> (String, Vec<Sample>) {
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "/metrics answered {status}: {body}");
    let samples = parse_exposition(&body);
    (body, samples)
}

// ---- traffic --------------------------------------------------------------------------------

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// An assign-only commit (generation -1), as kafka-consumer-groups --reset-offsets does.
fn commit(c: &mut Client, group: &str, topic: &str, partition: i32, offset: i64) {
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(""))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)])]);
    let r: OffsetCommitResponse = c.send(ApiKey::OffsetCommit, 8, &req);
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
}

fn start_with_metrics(extra: &[&str]) -> (Broker, SocketAddr) {
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listener = format!("metrics.listener={metrics}");
    let mut overrides = vec![listener.as_str()];
    overrides.extend_from_slice(extra);
    let b = Broker::start_with(&overrides);
    eventually(30, "/ready", || {
        matches!(try_http_get(metrics, "/ready"), Ok((200, _))).then_some(())
    });
    (b, metrics)
}

// ---- the tests ------------------------------------------------------------------------------

#[test]
fn metrics_follow_real_traffic() {
    let (broker, metrics) = start_with_metrics(&[]);
    assert_eq!(http_get(metrics, "/health").0, 200);
    assert_eq!(http_get(metrics, "/nope").0, 404);
    let mut c = broker.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("obs", 2, &[]), 0);
    assert_eq!(
        c.create_topic("strict", 1, &[("min.insync.replicas", "2")]),
        0
    );

    let mut bytes_in = 0u64;
    for i in 0..5 {
        let b = batch(&["a", "b", "c"]);
        bytes_in += b.len() as u64;
        assert_eq!(c.produce("obs", i % 2, b, 1).0, 0);
    }
    // acks=all on a topic needing 2 in-sync replicas: NOT_ENOUGH_REPLICAS, a failed produce.
    assert_eq!(c.produce("strict", 0, batch(&["x"]), -1).0, 19);
    let fetched: FetchResponse =
        c.send(ApiKey::Fetch, 12, &Client::fetch_request("obs", 0, 0, 0, 0));
    let p = &fetched.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let records = p.records.clone().unwrap();
    assert_eq!(common::records(records.clone()).len(), 9);
    commit(&mut c, "obs-group", "obs", 0, 2);

    let (text, m) = scrape(metrics);
    let obs = [("topic", "obs")];
    assert_eq!(
        value(&m, "kafka_server_brokertopicmetrics_messagesin_total", &obs),
        Some(15.0)
    );
    assert_eq!(
        value(&m, "kafka_server_brokertopicmetrics_bytesin_total", &obs),
        Some(bytes_in as f64)
    );
    assert_eq!(
        value(&m, "kafka_server_brokertopicmetrics_bytesout_total", &obs),
        Some(records.len() as f64)
    );
    assert_eq!(
        value(
            &m,
            "kafka_server_brokertopicmetrics_totalproducerequests_total",
            &obs
        ),
        Some(5.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_server_brokertopicmetrics_totalfetchrequests_total",
            &obs
        ),
        Some(1.0)
    );
    let strict = [("topic", "strict")];
    assert_eq!(
        value(
            &m,
            "kafka_server_brokertopicmetrics_failedproducerequests_total",
            &strict
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_server_brokertopicmetrics_messagesin_total",
            &strict
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_network_request_errors_total",
            &[("request", "Produce"), ("error", "NOT_ENOUGH_REPLICAS")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_network_request_duration_seconds_count",
            &[("request", "Produce")]
        ),
        Some(6.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_network_requests_total",
            &[("request", "OffsetCommit"), ("version", "8")]
        ),
        Some(1.0)
    );
    // Partition 0 got batches 0, 2 and 4: 9 records; the group committed 2.
    let p0 = [("topic", "obs"), ("partition", "0")];
    assert_eq!(
        value(&m, "kafka_topic_partition_current_offset", &p0),
        Some(9.0)
    );
    assert_eq!(
        value(&m, "kafka_topic_partition_oldest_offset", &p0),
        Some(0.0)
    );
    assert!(value(&m, "kafka_log_log_size", &p0).unwrap() > 0.0);
    let g0 = [
        ("consumergroup", "obs-group"),
        ("topic", "obs"),
        ("partition", "0"),
    ];
    assert_eq!(
        value(&m, "kafka_consumergroup_current_offset", &g0),
        Some(2.0)
    );
    assert_eq!(value(&m, "kafka_consumergroup_lag", &g0), Some(7.0));
    assert_eq!(
        value(
            &m,
            "kafka_consumergroup_lag_sum",
            &[("consumergroup", "obs-group"), ("topic", "obs")]
        ),
        Some(7.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_consumergroup_members",
            &[("consumergroup", "obs-group")]
        ),
        Some(0.0)
    );
    // The topic's three partitions and the fifty of __consumer_offsets, all led here.
    assert_eq!(
        value(&m, "kafka_server_replicamanager_partitioncount", &[]),
        Some(53.0)
    );
    assert_eq!(
        value(&m, "kafka_server_replicamanager_leadercount", &[]),
        Some(53.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_server_replicamanager_underminisrpartitioncount",
            &[]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_server_replicamanager_underreplicatedpartitions",
            &[]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_controller_kafkacontroller_activecontrollercount",
            &[]
        ),
        Some(1.0)
    );
    // __consumer_offsets counts, as in Kafka.
    assert_eq!(
        value(&m, "kafka_controller_kafkacontroller_globaltopiccount", &[]),
        Some(3.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_controller_kafkacontroller_globalpartitioncount",
            &[]
        ),
        Some(53.0)
    );
    assert_eq!(
        value(
            &m,
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            &[]
        ),
        Some(0.0)
    );
    assert!(
        value(
            &m,
            "kafka_server_socket_server_metrics_connection_count",
            &[("listener", "PLAINTEXT")]
        )
        .unwrap()
            >= 1.0
    );
    assert!(value(&m, "process_resident_memory_bytes", &[]).unwrap() > 0.0);
    assert_eq!(
        value(
            &m,
            "cairn_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );

    // The exposition passes Prometheus's own linter.
    let mut lint = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = lint.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Exit 3 is lint findings only (1 would be a format error). The accepted findings are
    // names kept as Strimzi's JMX exporter and kafka_exporter spell them, because existing
    // dashboards and alert rules query them so.
    const ACCEPTED_LINT: &[&str] = &[
        "kafka_server_socket_server_metrics_connection_count non-histogram and non-summary metrics should not have \"_count\" suffix",
        "kafka_consumergroup_current_offset_sum non-histogram and non-summary metrics should not have \"_sum\" suffix",
        "kafka_consumergroup_lag_sum non-histogram and non-summary metrics should not have \"_sum\" suffix",
        "kafka_log_logcleanermanager_time_since_last_run_ms metric names should not contain abbreviated units",
        "kafka_log_logcleanermanager_uncleanable_partitions_count non-histogram and non-summary metrics should not have \"_count\" suffix",
        "kafka_server_socket_server_metrics_expired_connections_killed_count counter metrics should have \"_total\" suffix",
        "kafka_server_socket_server_metrics_expired_connections_killed_count non-histogram and non-summary metrics should not have \"_count\" suffix",
        "kafka_log_logcleaner_dead_thread_count non-histogram and non-summary metrics should not have \"_count\" suffix",
    ];
    match out.status.code() {
        Some(0) => {}
        Some(3) => {
            for line in report.lines().filter(|l| !l.trim().is_empty()) {
                assert!(
                    ACCEPTED_LINT.contains(&line.trim()),
                    "promtool check metrics: {line}"
                );
            }
        }
        other => panic!("promtool check metrics exited {other:?}:\n{report}"),
    }

    // A deleted topic's series go away; the connection gauge follows closed connections.
    let del = DeleteTopicsRequest::default()
        .with_topic_names(vec![name("strict")])
        .with_timeout_ms(5000);
    let r: DeleteTopicsResponse = c.send(ApiKey::DeleteTopics, 4, &del);
    assert_eq!(r.responses[0].error_code, 0);
    drop(c);
    let m = eventually(30, "the closed connection to be counted", || {
        let (_, m) = scrape(metrics);
        (value(
            &m,
            "kafka_server_socket_server_metrics_connection_count",
            &[("listener", "PLAINTEXT")],
        ) == Some(0.0))
        .then_some(m)
    });
    assert!(m
        .iter()
        .all(|s| s.labels.get("topic").map(String::as_str) != Some("strict")));
    // "obs" and __consumer_offsets are left.
    assert_eq!(
        value(&m, "kafka_controller_kafkacontroller_globaltopiccount", &[]),
        Some(2.0)
    );
}

#[test]
fn partition_series_can_be_switched_off() {
    let (broker, metrics) = start_with_metrics(&["metrics.partition.series.enable=false"]);
    let mut c = broker.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("quiet", 3, &[]), 0);
    assert_eq!(c.produce("quiet", 1, batch(&["a", "b"]), 1).0, 0);
    commit(&mut c, "g", "quiet", 1, 1);
    let (_, m) = scrape(metrics);
    for per_partition in [
        "kafka_log_log_size",
        "kafka_topic_partition_current_offset",
        "kafka_topic_partition_last_stable_offset",
        "kafka_consumergroup_lag",
        "kafka_consumergroup_current_offset",
    ] {
        assert!(
            m.iter().all(|s| s.name != per_partition),
            "{per_partition} is exported"
        );
    }
    assert!(m.iter().all(|s| !s.labels.contains_key("partition")));
    assert_eq!(
        value(
            &m,
            "kafka_consumergroup_lag_sum",
            &[("consumergroup", "g"), ("topic", "quiet")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&m, "kafka_topic_partitions", &[("topic", "quiet")]),
        Some(3.0)
    );
}

/// The log cleaner's gauges and counters (Kafka's LogCleaner and LogCleanerManager names)
/// follow its passes: 300 commits of one offset go to `__consumer_offsets`, compacted, with
/// 1 KiB segments here; the cleaner reads them and keeps a fraction.
#[test]
fn log_cleaner_metrics_follow_its_passes() {
    let (broker, metrics) = start_with_metrics(&[
        "offsets.topic.num.partitions=1",
        "offsets.topic.segment.bytes=1024",
        "log.cleaner.backoff.ms=100",
    ]);
    let mut c = broker.client();
    c.await_group_coordinator();
    assert_eq!(c.create_topic("cleaned", 1, &[]), 0);
    let (_, before) = scrape(metrics);
    let read = |s: &[Sample]| value(s, "kafka_log_logcleaner_read_bytes_total", &[]);
    assert_eq!(read(&before), Some(0.0), "nothing to clean yet");
    for round in 0..300 {
        commit(&mut c, "cleaner-metrics", "cleaned", 0, round);
    }
    let samples = eventually(60, "a cleaning pass", || {
        let (_, s) = scrape(metrics);
        (read(&s)? > 0.0).then_some(s)
    });
    let get =
        |name: &str| value(&samples, name, &[]).unwrap_or_else(|| panic!("{name} is missing"));
    let (bytes_read, kept) = (
        get("kafka_log_logcleaner_read_bytes_total"),
        get("kafka_log_logcleaner_written_bytes_total"),
    );
    assert!(
        kept > 0.0 && kept < bytes_read / 2.0,
        "kept {kept} of {bytes_read} bytes"
    );
    let recopy = get("kafka_log_logcleaner_cleaner_recopy_percent");
    assert!((0.0..50.0).contains(&recopy), "recopy {recopy}%");
    let buffer = get("kafka_log_logcleaner_max_buffer_utilization_percent");
    assert!((0.0..=100.0).contains(&buffer), "buffer {buffer}%");
    let dirty = get("kafka_log_logcleanermanager_max_dirty_percent");
    assert!((0.0..=100.0).contains(&dirty), "dirty {dirty}%");
    assert!(get("kafka_log_logcleanermanager_time_since_last_run_ms") >= 0.0);
    // The topic's max.compaction.lag.ms is Kafka's default (unbounded): never overdue.
    assert_eq!(
        get("kafka_log_logcleanermanager_max_compaction_delay_secs"),
        0.0
    );
    assert_eq!(
        get("kafka_log_logcleanermanager_uncleanable_partitions_count"),
        0.0
    );
    assert!(get("kafka_log_logcleaner_max_clean_time_secs") >= 0.0);
    assert_eq!(get("kafka_log_logcleaner_dead_thread_count"), 0.0);
    // The group's offset is still the last one committed.
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(s("cleaner-metrics")))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(name("cleaned"))
            .with_partition_indexes(vec![0])]));
    let r: OffsetFetchResponse = c.send(ApiKey::OffsetFetch, 7, &fetch);
    assert_eq!(r.topics[0].partitions[0].committed_offset, 299);
}

#[test]
fn bad_metrics_listener_stops_start_up_with_a_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args([
            "--override",
            "metrics.listener=nowhere",
            "--override",
            "log.dirs=/nonexistent/x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics.listener"), "{err}");

    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["--override", "metrics.partition.series.enable=maybe"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics.partition.series.enable"), "{err}");
}

#[test]
fn healthcheck_subcommand_follows_ready() {
    let port = free_port();
    let hc = |addr: &str| {
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["healthcheck", addr])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(
        !hc(&format!("127.0.0.1:{port}")),
        "healthy with nothing listening"
    );
    let (_broker, metrics) = start_with_metrics(&[]);
    assert!(hc(&metrics.to_string()));
}

/// Sets `producer_byte_rate` and `consumer_byte_rate` for `client_id` to `rate`.
fn set_byte_rates(c: &mut Client, client_id: &str, rate: f64) {
    set_client_quotas(
        c,
        client_id,
        &[("producer_byte_rate", rate), ("consumer_byte_rate", rate)],
    );
}

/// Sets each quota of `quotas` for `client_id`.
fn set_client_quotas(c: &mut Client, client_id: &str, quotas: &[(&str, f64)]) {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    let entry = EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(s("client-id"))
            .with_entity_name(Some(s(client_id)))])
        .with_ops(
            quotas
                .iter()
                .map(|(k, v)| OpData::default().with_key(s(k)).with_value(*v))
                .collect(),
        );
    let r: AlterClientQuotasResponse = c.send(
        ApiKey::AlterClientQuotas,
        1,
        &AlterClientQuotasRequest::default().with_entries(vec![entry]),
    );
    assert_eq!(r.entries[0].error_code, 0, "{r:?}");
}

// ---- dashboards and rules against the exported names ------------------------------------------

/// Names the broker exports, with the labels each carries, after traffic that makes every
/// family appear (topics, a group with an offset, a request error).
fn exported_names() -> BTreeMap<String, BTreeSet<String>> {
    let (broker, metrics) = start_with_metrics(&[]);
    let mut c = broker.client();
    c.await_group_coordinator();
    assert_eq!(
        c.create_topic("names", 1, &[("min.insync.replicas", "2")]),
        0
    );
    assert_eq!(c.produce("names", 0, batch(&["a"]), 1).0, 0);
    assert_eq!(c.produce("names", 0, batch(&["b"]), -1).0, 19);
    commit(&mut c, "names-group", "names", 0, 1);
    // A client (generous) byte-rate and request quotas apply to, producing and consuming.
    set_client_quotas(
        &mut c,
        "cairn-tests",
        &[
            ("producer_byte_rate", 1e12),
            ("consumer_byte_rate", 1e12),
            ("request_percentage", 1e6),
        ],
    );
    assert_eq!(c.produce("names", 0, batch(&["c"]), 1).0, 0);
    assert_eq!(c.fetch("names", 0, 0).0, 0);
    let _share = share_traffic(&[broker.addr], "names", "names-share");
    let (_, m) = scrape(metrics);
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in m {
        names
            .entry(s.name)
            .or_default()
            .extend(s.labels.into_keys());
    }
    names
}

/// A share group `group` on partition 0 of `topic` across the brokers at `addrs`: a member
/// joins (at the group coordinator), is handed records produced then, releases them and is
/// handed them again, so every share family has series. The clients are returned to be
/// kept open: the share partition stays loaded (and its gauges present) while its member's
/// session lives.
fn share_traffic(addrs: &[SocketAddr], topic: &str, group: &str) -> Vec<Client> {
    use common::share::{acquired, heartbeat, share_ack, share_fetch, topic_id};
    let mut clients: Vec<Client> = addrs.iter().map(|a| Client::connect(*a)).collect();
    let t = eventually(60, "the topic's id", || {
        Some(topic_id(&mut clients[0], topic)).filter(|id| !id.is_nil())
    });
    eventually(60, "a share group member to join", || {
        // As clients do: FindCoordinator first (it creates __consumer_offsets).
        let _: FindCoordinatorResponse = clients[0].send(
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.to_string())),
        );
        clients.iter_mut().find_map(|c| {
            let r = heartbeat(c, group, "share-member", 0, Some(&[topic]));
            (r.error_code == 0).then_some(())
        })
    });
    // The partition's leader is where its share session and records are.
    let leader = eventually(60, "the share partition's leader", || {
        clients.iter_mut().position(|c| {
            let r = share_fetch(c, group, "share-member", 0, t, &[], 0);
            r.error_code == 0
                && r.responses
                    .iter()
                    .flat_map(|x| &x.partitions)
                    .all(|p| p.error_code == 0)
        })
    });
    let c = &mut clients[leader];
    assert_eq!(c.produce(topic, 0, batch(&["share-1", "share-2"]), 1).0, 0);
    let r = share_fetch(c, group, "share-member", 1, t, &[], 5000);
    let got = acquired(&r);
    assert_eq!(got.len(), 1, "{got:?}");
    let (first, last, _) = got[0];
    let r = share_ack(c, group, "share-member", 2, t, &[(first, last, &[2])]);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let r = share_fetch(c, group, "share-member", 3, t, &[], 5000);
    assert_eq!(acquired(&r), [(first, last, 2)]);
    clients
}

/// Grafana's variables replaced by values PromQL accepts.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "15s")
        .replace("$instance", ".*")
        .replace("$topic", ".*")
        .replace("$consumergroup", ".*")
}

/// Every metric name an expression selects, and what a Grafana linter would object to:
/// counters (`_total`, `_bucket`) outside rate/irate/increase, and those functions over a
/// range other than `$__rate_interval`. A small PromQL tokenizer: the syntax itself is
/// checked by promtool (`promql_is_valid`).
fn selectors(expr: &str, problems: &mut Vec<String>) -> Vec<String> {
    const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan"];
    const AGGREGATIONS: &[&str] = &[
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    const LABEL_LISTS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    // The function (or "" for plain parentheses) each open parenthesis belongs to.
    let mut calls: Vec<String> = Vec::new();
    let mut pending: Option<String> = None;
    let mut i = 0;
    let skip_to = |i: &mut usize, close: char| {
        while *i < chars.len() && chars[*i] != close {
            if chars[*i] == '"' {
                *i += 1;
                while *i < chars.len() && chars[*i] != '"' {
                    *i += if chars[*i] == '\\' { 2 } else { 1 };
                }
            }
            *i += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            let q = c;
            i += 1;
            while i < chars.len() && chars[i] != q {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' {
            skip_to(&mut i, '}');
            i += 1;
        } else if c == '[' {
            let start = i + 1;
            skip_to(&mut i, ']');
            let range: String = chars[start..i.min(chars.len())].iter().collect();
            if let Some(f) = calls.last() {
                if ["rate", "irate", "increase"].contains(&f.as_str())
                    && range != "$__rate_interval"
                {
                    problems.push(format!("{f}() over [{range}], not $__rate_interval"));
                }
            }
            i += 1;
        } else if c == '(' {
            calls.push(pending.take().unwrap_or_default());
            i += 1;
        } else if c == ')' {
            calls.pop();
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j] == ' ' {
                j += 1;
            }
            let next = chars.get(j).copied();
            if LABEL_LISTS.contains(&word.as_str()) {
                if next == Some('(') {
                    i = j;
                    skip_to(&mut i, ')');
                    i += 1;
                }
            } else if next == Some('(') {
                calls.push(word);
                i = j + 1;
            } else if AGGREGATIONS.contains(&word.as_str()) {
                // `sum by (x) (...)`: the call's parenthesis comes after the label list.
                pending = Some(word);
            } else if !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                let counter = word.ends_with("_total") || word.ends_with("_bucket");
                let in_rate = calls
                    .iter()
                    .any(|f| ["rate", "irate", "increase"].contains(&f.as_str()));
                if counter && !in_rate {
                    problems.push(format!("counter {word} is used without rate/increase"));
                }
                names.push(word);
            }
        } else if c.is_ascii_digit() {
            // Numbers and durations (5m, 0.99, 1e3).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Parses every expression with Prometheus's own parser: as recording rules under
/// `promtool check rules`. Returns the places whose expression it refused.
fn promql_is_valid(queries: &[(String, String)]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let promtool = tool("promtool");
    let mut bad = Vec::new();
    for (place, q) in queries {
        let rule = serde_yaml::to_string(&serde_json::json!({
            "groups": [{"name": "check", "rules": [{"record": "dashboard:check", "expr": substitute(q)}]}]
        }))
        .unwrap();
        let path = dir.path().join("rule.yml");
        std::fs::write(&path, rule).unwrap();
        let out = Command::new(&promtool)
            .args(["check", "rules"])
            .arg(&path)
            .output()
            .unwrap();
        if !out.status.success() {
            bad.push(format!(
                "{place}: {q:?}: {}",
                String::from_utf8_lossy(&out.stdout).trim()
            ));
        }
    }
    bad
}

fn dashboards() -> Vec<(PathBuf, serde_json::Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root().join("grafana/dashboards")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
            out.push((path, json));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        out.len() >= 3,
        "the overview, topics and consumer-groups dashboards"
    );
    out
}

/// (where, PromQL) of every panel target in a dashboard, checking panel conventions.
fn dashboard_queries(
    path: &Path,
    d: &serde_json::Value,
    problems: &mut Vec<String>,
) -> Vec<(String, String)> {
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let mut out = Vec::new();
    let vars = d["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ds_vars = vars.iter().filter(|v| v["type"] == "datasource").count();
    if ds_vars != 1 {
        problems.push(format!("{file}: {ds_vars} datasource variables, want 1"));
    }
    for v in &vars {
        if v["type"] == "query" {
            // label_values(metric, label): the metric and label must exist.
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .unwrap_or_default();
            out.push((format!("{file} variable {}", v["name"]), q.to_string()));
        }
    }
    for p in d["panels"].as_array().unwrap() {
        let title = p["title"].as_str().unwrap_or_default();
        if p["type"] == "row" {
            continue;
        }
        if title.is_empty() {
            problems.push(format!("{file}: a panel without a title"));
        }
        if p["datasource"]["uid"] != "${datasource}" {
            problems.push(format!(
                "{file} '{title}': datasource is not the ${{datasource}} variable"
            ));
        }
        if p["fieldConfig"]["defaults"]["unit"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        {
            problems.push(format!("{file} '{title}': no unit"));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("{file} '{title}': no queries"));
        }
        for t in targets {
            out.push((
                format!("{file} '{title}'"),
                t["expr"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    out
}

fn rule_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("prometheus/alerts.yml")).unwrap();
    let y: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let mut out = Vec::new();
    for g in y["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            out.push((
                format!("alert {}", r["alert"].as_str().unwrap_or("?")),
                r["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

#[test]
fn dashboards_and_rules_query_only_what_the_broker_exports() {
    let exported = exported_names();
    let mut problems = Vec::new();
    let mut uids = BTreeSet::new();
    let mut queries = rule_queries();
    for (path, d) in dashboards() {
        let uid = d["uid"].as_str().unwrap_or_default().to_string();
        if uid.is_empty() || !uids.insert(uid.clone()) {
            problems.push(format!(
                "{}: missing or duplicate uid '{uid}'",
                path.display()
            ));
        }
        queries.extend(dashboard_queries(&path, &d, &mut problems));
    }
    // Prometheus's own series that rules may use.
    let prometheus_made = ["up"];
    for (place, q) in &queries {
        if let Some(args) = q.strip_prefix("label_values(") {
            let (metric, label) = args.trim_end_matches(')').split_once(',').unwrap();
            // Prometheus adds `instance` and `job` to every scraped series.
            let label = label.trim();
            match exported.get(metric.trim()) {
                Some(labels) if labels.contains(label) || ["instance", "job"].contains(&label) => {}
                _ => problems.push(format!("{place}: {metric} has no label {label}")),
            }
            continue;
        }
        let mut found = Vec::new();
        let names = selectors(q, &mut found);
        problems.extend(found.into_iter().map(|p| format!("{place}: {p}")));
        assert!(!names.is_empty(), "{place}: selects nothing");
        for n in names {
            if !exported.contains_key(&n) && !prometheus_made.contains(&n.as_str()) {
                problems.push(format!("{place}: {n} is not exported by the broker"));
            }
        }
    }
    let promql: Vec<(String, String)> = queries
        .iter()
        .filter(|(_, q)| !q.starts_with("label_values("))
        .cloned()
        .collect();
    problems.extend(promql_is_valid(&promql));
    // The provisioned datasource is the one the dashboards default to.
    let ds =
        std::fs::read_to_string(root().join("grafana/provisioning/datasources/prometheus.yml"))
            .unwrap();
    let ds: serde_yaml::Value = serde_yaml::from_str(&ds).unwrap();
    assert_eq!(ds["datasources"][0]["uid"].as_str(), Some("prometheus"));
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(queries.len() > 40, "only {} queries checked", queries.len());
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let promtool = tool("promtool");
    run_ok(
        Command::new(&promtool)
            .args(["check", "config"])
            .arg(root().join("prometheus/prometheus.yml")),
    );
    let out = run_ok(
        Command::new(&promtool)
            .args(["test", "rules", "alerts.test.yml"])
            .current_dir(root().join("prometheus")),
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn compose_file_follows_the_compose_spec() {
    run_ok(
        Command::new(tool("check-jsonschema"))
            .args(["--builtin-schema", "vendor.compose-spec"])
            .arg(root().join("docker-compose.yml")),
    );
    // And the checker does reject a broken file, so the check above means something.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yml");
    std::fs::write(&bad, "services:\n  x:\n    image: 3\n    ports: {a: b}\n").unwrap();
    let st = Command::new(tool("check-jsonschema"))
        .args(["--builtin-schema", "vendor.compose-spec"])
        .arg(&bad)
        .output()
        .unwrap()
        .status;
    assert!(
        !st.success(),
        "check-jsonschema accepted a broken compose file"
    );
}

// ---- the compose topology as processes, with a real Prometheus ---------------------------------

/// `NAME://host:port` -> (NAME, host, port).
fn listener_parts(l: &str) -> (String, String, u16) {
    let (name, addr) = l
        .trim()
        .split_once("://")
        .unwrap_or_else(|| panic!("listener {l:?} is not NAME://host:port"));
    let (host, port) = addr
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("listener {l:?} has no port"));
    let port = port
        .parse()
        .unwrap_or_else(|_| panic!("listener {l:?}: bad port"));
    (name.to_string(), host.to_string(), port)
}

/// Rewrites a listener list (`NAME://host:port,...`) to loopback ports from `ports`.
fn loopback_listeners(v: &str, ports: &BTreeMap<String, u16>) -> String {
    v.split(',')
        .map(|l| {
            let (name, _, _) = listener_parts(l);
            let port = ports
                .get(&name)
                .unwrap_or_else(|| panic!("{l:?} names no listener of the service"));
            format!("{name}://127.0.0.1:{port}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A listener of a compose service, as the compose network reaches it.
struct Endpoint {
    node_id: String,
    listener: String,
    /// The loopback port the process listens on instead.
    loopback: u16,
}

/// Rewrites `controller.quorum.voters` (`id@host:port,...`, hosts of the compose network)
/// to the loopback ports of those services' listeners. Each voter must be the controller
/// listener of the service with that node id.
fn loopback_voters(
    v: &str,
    network: &BTreeMap<(String, u16), Endpoint>,
    controller_listeners: &str,
) -> String {
    v.split(',')
        .map(|entry| {
            let (id, addr) = entry
                .trim()
                .split_once('@')
                .unwrap_or_else(|| panic!("voter {entry:?} is not id@host:port"));
            let (host, port) = addr
                .rsplit_once(':')
                .unwrap_or_else(|| panic!("voter {entry:?} has no port"));
            let port: u16 = port.parse().unwrap();
            let e = network
                .get(&(host.to_string(), port))
                .unwrap_or_else(|| panic!("voter {entry:?} is no listener of a compose service"));
            assert_eq!(
                e.node_id, id,
                "voter {entry:?} is the host of another node id"
            );
            assert!(
                controller_listeners
                    .split(',')
                    .any(|n| n.trim() == e.listener),
                "voter {entry:?} is the {} listener, not a controller listener",
                e.listener
            );
            format!("{id}@127.0.0.1:{}", e.loopback)
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A broker of the compose topology run as a process; its log is shown when the test fails.
struct ComposeBroker {
    svc: String,
    proc: Proc,
    log: PathBuf,
}

impl ComposeBroker {
    /// Fails the test (showing the log, on drop) if the process has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.proc.0.try_wait().unwrap() {
            panic!("{} exited: {status}", self.svc);
        }
    }
}

impl Drop for ComposeBroker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "---- {} log, last 60 lines ----\n{}",
                self.svc,
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
    }
}

struct Query(SocketAddr);

impl Query {
    /// The result vector of an instant query, or the error Prometheus gave.
    fn instant(&self, q: &str) -> Result<Vec<serde_json::Value>, String> {
        let (status, body) =
            try_http_get(self.0, &format!("/api/v1/query?query={}", url_encode(q)))
                .map_err(|e| e.to_string())?;
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {status}: {e}: {body}"))?;
        if v["status"] != "success" {
            return Err(format!("{}: {}", v["errorType"], v["error"]));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    fn scalar(&self, q: &str) -> Option<f64> {
        let r = self.instant(q).ok()?;
        r.first()?["value"][1].as_str()?.parse().ok()
    }
}

/// A cairn service of the compose topology (built from this repository; prometheus and
/// grafana are not: the tests run their own Prometheus). Every listener gets a free
/// loopback port.
struct Service {
    svc: String,
    env: Vec<(String, String)>,
    ports: BTreeMap<String, u16>,
    metrics: String,
    healthcheck: Vec<String>,
    /// Bind mounts: the path in the container -> the source as the compose file names it.
    binds: Vec<(String, String)>,
}

impl Service {
    fn get(&self, key: &str) -> String {
        let found = self.env.iter().find(|(k, _)| k == key);
        found.map(|(_, v)| v.clone()).unwrap_or_default()
    }
}

/// The compose files merged as `docker compose -f a -f b` merges them: a later file's
/// service environment keys win, its volumes are added.
fn load_compose(files: &[&str]) -> serde_yaml::Value {
    let read = |f: &str| -> serde_yaml::Value {
        serde_yaml::from_str(&std::fs::read_to_string(root().join(f)).unwrap()).unwrap()
    };
    let mut merged = read(files[0]);
    for f in &files[1..] {
        let over = read(f);
        for (svc, def) in over["services"].as_mapping().unwrap() {
            let base = merged["services"]
                .get_mut(svc)
                .unwrap_or_else(|| panic!("{f}: {svc:?} is not a service of {}", files[0]));
            for (k, v) in def["environment"].as_mapping().into_iter().flatten() {
                base["environment"]
                    .as_mapping_mut()
                    .unwrap()
                    .insert(k.clone(), v.clone());
            }
            for v in def["volumes"].as_sequence().into_iter().flatten() {
                if base["volumes"].is_null() {
                    base["volumes"] = serde_yaml::Value::Sequence(Vec::new());
                }
                base["volumes"].as_sequence_mut().unwrap().push(v.clone());
            }
        }
    }
    merged
}

/// The compose topology run as processes.
struct Running {
    services: Vec<Service>,
    brokers: Vec<ComposeBroker>,
    /// host:port in the scrape config -> where the process serves /metrics.
    targets: BTreeMap<String, String>,
    /// The listener each broker publishes to the host (advertised as localhost).
    external: BTreeSet<String>,
    /// Where clients on the host bootstrap: the first broker's published listener.
    bootstrap: String,
}

/// Runs the cairn services of `compose` as processes in `tmp`, their addresses on the
/// compose network rewritten to loopback and paths under a bind mount to `sources`' host
/// path for its source, and waits until each passes its compose health check.
fn run_compose(
    compose: &serde_yaml::Value,
    tmp: &Path,
    sources: &BTreeMap<&str, PathBuf>,
) -> Running {
    let mut services = Vec::new();
    // host:port on the compose network -> the listener and loopback port standing for it.
    let mut network: BTreeMap<(String, u16), Endpoint> = BTreeMap::new();
    let mut hosts = Vec::new();
    for (svc, def) in compose["services"].as_mapping().unwrap() {
        let svc = svc.as_str().unwrap().to_string();
        if def["build"].is_null() {
            continue;
        }
        let host = def["hostname"].as_str().unwrap_or(&svc).to_string();
        let env: Vec<(String, String)> = def["environment"]
            .as_mapping()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let v = v
                    .as_str()
                    .unwrap_or_else(|| panic!("{svc}: {k:?} is not a string"));
                (k.as_str().unwrap().to_string(), v.to_string())
            })
            .collect();
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let mut ports = BTreeMap::new();
        for l in get("KAFKA_LISTENERS").split(',') {
            let (name, _, port) = listener_parts(l);
            let loopback = free_port();
            ports.insert(name.clone(), loopback);
            let e = Endpoint {
                node_id: get("KAFKA_NODE_ID"),
                listener: name,
                loopback,
            };
            assert!(
                network.insert((host.clone(), port), e).is_none(),
                "{svc}: two listeners on port {port}"
            );
        }
        let healthcheck = def["healthcheck"]["test"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        // `./source:/in/container[:ro]`; named volumes (the data dir) are not binds.
        let binds = def["volumes"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|v| {
                let mut parts = v.as_str()?.split(':');
                let (source, target) = (parts.next()?, parts.next()?);
                source
                    .starts_with("./")
                    .then(|| (target.to_string(), source.to_string()))
            })
            .collect();
        hosts.push(host);
        services.push(Service {
            svc,
            env,
            ports,
            metrics: format!("127.0.0.1:{}", free_port()),
            healthcheck,
            binds,
        });
    }
    assert!(
        !services.is_empty(),
        "docker-compose.yml has no cairn service"
    );

    // Every service as a process, its addresses on the compose network rewritten to loopback.
    let mut brokers = Vec::new();
    // host:port in the scrape config -> where the process serves /metrics.
    let mut targets: BTreeMap<String, String> = BTreeMap::new();
    // The listener each broker publishes to the host (advertised as localhost).
    let mut external = BTreeSet::new();
    for s in &services {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
        let controller_names = s.get("KAFKA_CONTROLLER_LISTENER_NAMES");
        for (k, v) in &s.env {
            let v = match k.as_str() {
                "KAFKA_LISTENERS" | "KAFKA_ADVERTISED_LISTENERS" => loopback_listeners(v, &s.ports),
                "KAFKA_CONTROLLER_QUORUM_VOTERS" => loopback_voters(v, &network, &controller_names),
                "KAFKA_LOG_DIRS" => tmp.join(&s.svc).display().to_string(),
                "KAFKA_METRICS_LISTENER" => s.metrics.clone(),
                _ => match s
                    .binds
                    .iter()
                    .find(|(target, _)| v.starts_with(target.as_str()))
                {
                    Some((target, source)) => {
                        let host = sources.get(source.as_str()).unwrap_or_else(|| {
                            panic!(
                                "{}: {k} is under {source}, which the test does not provide",
                                s.svc
                            )
                        });
                        format!("{}{}", host.display(), &v[target.len()..])
                    }
                    None => v.to_string(),
                },
            };
            for h in &hosts {
                assert!(
                    !v.contains(&format!("{h}:")),
                    "{}: {k}={v} still names the compose network",
                    s.svc
                );
            }
            cmd.env(k, v);
        }
        for a in s.get("KAFKA_ADVERTISED_LISTENERS").split(',') {
            let (name, host, _) = listener_parts(a);
            if host == "localhost" {
                external.insert(format!("127.0.0.1:{}", s.ports[&name]));
            }
        }
        let scrape_port = s
            .get("KAFKA_METRICS_LISTENER")
            .rsplit(':')
            .next()
            .unwrap()
            .to_string();
        targets.insert(format!("{}:{scrape_port}", s.svc), s.metrics.clone());
        let log = tmp.join(format!("{}.log", s.svc));
        cmd.env("CAIRN_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        brokers.push(ComposeBroker {
            svc: s.svc.clone(),
            proc: Proc(cmd.spawn().unwrap()),
            log,
        });
    }
    assert_eq!(
        external.len(),
        services.len(),
        "every broker publishes one listener to the host"
    );
    // Clients on the host bootstrap from the first broker.
    let bootstrap = {
        let s = &services[0];
        let (name, _, _) = s
            .get("KAFKA_ADVERTISED_LISTENERS")
            .split(',')
            .map(listener_parts)
            .find(|(_, h, _)| h == "localhost")
            .unwrap();
        format!("127.0.0.1:{}", s.ports[&name])
    };

    // The compose health check of each, run as the container would run it, once all are
    // started (a quorum needs its voters).
    for (s, b) in services.iter().zip(brokers.iter_mut()) {
        let test = &s.healthcheck;
        assert_eq!(test[0], "CMD");
        assert!(test[1].ends_with("/cairn"), "{test:?}");
        let what = format!("the compose health check of {} to pass", s.svc);
        eventually(60, &what, || {
            b.assert_running();
            let args: Vec<String> = test[2..]
                .iter()
                .map(|a| {
                    if a.ends_with(":9644") {
                        s.metrics.clone()
                    } else {
                        a.clone()
                    }
                })
                .collect();
            Command::new(env!("CARGO_BIN_EXE_cairn"))
                .args(&args)
                .output()
                .unwrap()
                .status
                .success()
                .then_some(())
        });
    }
    Running {
        services,
        brokers,
        targets,
        external,
        bootstrap,
    }
}

#[test]
fn compose_topology_runs_as_processes_under_a_real_prometheus() {
    let compose = load_compose(&["docker-compose.yml"]);
    let tmp = tempfile::tempdir().unwrap();
    let Running {
        services,
        mut brokers,
        targets,
        external,
        bootstrap,
    } = run_compose(&compose, tmp.path(), &BTreeMap::new());
    let n = services.len() as f64;

    // The repository's scrape config and rules, pointed at the processes, scraping every second.
    let prom_dir = tmp.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    std::fs::copy(
        root().join("prometheus/alerts.yml"),
        prom_dir.join("alerts.yml"),
    )
    .unwrap();
    let mut config: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("prometheus/prometheus.yml")).unwrap(),
    )
    .unwrap();
    config["global"]["scrape_interval"] = "1s".into();
    config["global"]["evaluation_interval"] = "1s".into();
    let mut rewritten = 0;
    for job in config["scrape_configs"].as_sequence_mut().unwrap() {
        for sc in job["static_configs"].as_sequence_mut().unwrap() {
            for t in sc["targets"].as_sequence_mut().unwrap() {
                let addr = targets
                    .get(t.as_str().unwrap())
                    .unwrap_or_else(|| panic!("scrape target {t:?} is not a compose service"));
                *t = addr.clone().into();
                rewritten += 1;
            }
        }
    }
    assert_eq!(rewritten, targets.len(), "every broker is scraped");
    std::fs::write(
        prom_dir.join("prometheus.yml"),
        serde_yaml::to_string(&config).unwrap(),
    )
    .unwrap();
    let prom_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _prometheus = Proc(
        Command::new(tool("prometheus"))
            .arg(format!(
                "--config.file={}",
                prom_dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                tmp.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let prom = Query(prom_addr);
    eventually(60, "Prometheus to scrape every broker", || {
        (prom.scalar("count(up{job=\"cairn\"} == 1)") == Some(targets.len() as f64)).then_some(())
    });
    // One cluster: every broker counts them all live, and exactly one is the active
    // controller (the controller-wide gauges are 1 only there).
    eventually(60, "every broker to see the whole cluster", || {
        for b in brokers.iter_mut() {
            b.assert_running();
        }
        let all = prom.scalar(&format!("count(kafka_brokers{{job=\"cairn\"}} == {n})"));
        let active = prom.scalar("sum(kafka_controller_kafkacontroller_activecontrollercount)");
        (all == Some(n) && active == Some(1.0)).then_some(())
    });
    // A share group, for the share panels, on a topic of its own (one replica, so its
    // min.insync.replicas is 1: the cluster's 2 would count it under min ISR, as Kafka does).
    let addrs: Vec<SocketAddr> = external.iter().map(|a| a.parse().unwrap()).collect();
    let created =
        Client::connect(addrs[0]).create_topic("compose-share", 1, &[("min.insync.replicas", "1")]);
    assert_eq!(created, 0);
    let _share = share_traffic(&addrs, "compose-share", "compose-share");

    // Producer ids are unique in the cluster: each broker's block comes from the controller.
    let mut producer_ids = BTreeSet::new();
    for addr in &external {
        let mut c = Client::connect(addr.parse().unwrap());
        for _ in 0..3 {
            let r: InitProducerIdResponse = c.send(
                ApiKey::InitProducerId,
                4,
                &InitProducerIdRequest::default().with_transactional_id(None),
            );
            assert_eq!(r.error_code, 0, "InitProducerId on {addr}");
            assert!(
                producer_ids.insert(r.producer_id.0),
                "{} handed out twice",
                r.producer_id.0
            );
        }
    }
    // Clients on the host are handed every broker's published listener, and nothing else
    // (the controller listener is not advertised).
    let out = Command::new(tool("kcat"))
        .args(["-L", "-J", "-b", &bootstrap])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kcat -L: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("kcat -L -J: {e}: {text}"));
    let advertised: BTreeSet<String> = metadata["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(advertised, external, "{metadata}");

    // kcat's client id (librdkafka's default) gets byte-rate and request quotas too high
    // to throttle it, so the quota panels have series.
    set_client_quotas(
        &mut Client::connect(addrs[0]),
        "rdkafka",
        &[
            ("producer_byte_rate", 1e12),
            ("consumer_byte_rate", 1e12),
            ("request_percentage", 1e6),
        ],
    );
    // Real clients: kcat produces a record (creating the topic), and once Prometheus has
    // seen the topic's counters, 200 more (a rate needs two samples of a moving counter);
    // then a kcat group consumer reads everything and commits.
    let produce = |n: usize| {
        let input: String = (0..n).map(|i| format!("record-{i}\n")).collect();
        let mut producer = Command::new(tool("kcat"))
            .args(["-P", "-b", &bootstrap, "-t", "compose-topic"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        producer
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        assert!(producer.wait().unwrap().success());
    };
    produce(1);
    // Every replica's broker has the topic's series, but only the leader's counts the record:
    // wait for that one.
    eventually(60, "the new topic's counter in Prometheus", || {
        prom.scalar(
            "sum(kafka_server_brokertopicmetrics_messagesin_total{topic=\"compose-topic\"})",
        )
        .filter(|v| *v == 1.0)
    });
    produce(200);
    // The topic has a replica on every broker (default.replication.factor), all caught up.
    eventually(
        60,
        "every replica of the topic to hold all 201 records",
        || {
            let caught_up = prom.scalar(
                "count(kafka_topic_partition_current_offset{topic=\"compose-topic\"} == 201)",
            )?;
            (caught_up == n).then_some(())
        },
    );
    let _consumer = Proc(
        Command::new(tool("kcat"))
            .args([
                "-b",
                &bootstrap,
                "-G",
                "compose-group",
                "-o",
                "beginning",
                "-q",
            ])
            .args(["-X", "auto.commit.interval.ms=200", "compose-topic"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    eventually(90, "the produce rate in Prometheus", || {
        prom.scalar("sum(rate(kafka_server_brokertopicmetrics_messagesin_total{topic=\"compose-topic\"}[30s]))")
            .filter(|v| *v > 0.0)
    });
    eventually(
        90,
        "the group's committed offset and member in Prometheus",
        || {
            let committed = prom.scalar(
                "sum(kafka_consumergroup_current_offset{consumergroup=\"compose-group\"})",
            )?;
            let members =
                prom.scalar("sum(kafka_consumergroup_members{consumergroup=\"compose-group\"})")?;
            let lag =
                prom.scalar("sum(kafka_consumergroup_lag{consumergroup=\"compose-group\"})")?;
            (committed == 201.0 && members == 1.0 && lag == 0.0).then_some(())
        },
    );

    // Every dashboard query is accepted by Prometheus and returns data.
    let mut problems = Vec::new();
    let mut checked = 0;
    for (path, d) in dashboards() {
        for (place, q) in dashboard_queries(&path, &d, &mut problems) {
            if q.starts_with("label_values(") {
                continue;
            }
            let q = substitute(&q);
            checked += 1;
            let r = eventually(60, &format!("{place} to answer"), || {
                match prom.instant(&q) {
                    Ok(r) if r.is_empty() => None,
                    other => Some(other),
                }
            });
            if let Err(e) = r {
                problems.push(format!("{place}: {q}: {e}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 30);

    // The alert rules are loaded and evaluate without error, and none fires on a healthy
    // cluster.
    let rules = eventually(60, "every rule to be evaluated", || {
        let (_, body) = try_http_get(prom_addr, "/api/v1/rules").ok()?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let rules: Vec<serde_json::Value> = v["data"]["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        rules
            .iter()
            .all(|r| {
                r["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001"))
            })
            .then_some(rules)
    });
    assert_eq!(rules.len(), rule_queries().len());
    for r in &rules {
        assert_eq!(r["health"], "ok", "rule {} : {}", r["name"], r["lastError"]);
        assert_eq!(
            r["state"], "inactive",
            "rule {} fires on a healthy cluster",
            r["name"]
        );
    }
}

/// docker-compose.secure.yml over docker-compose.yml, as processes with the test
/// certificates for ./secrets: the brokers replicate over SASL_SSL (acks=all to three
/// replicas with min.insync.replicas 2 needs them to), clients log in with PLAIN on
/// EXTERNAL, and the StandardAuthorizer refuses a user without ACLs.
#[test]
fn secured_compose_topology_replicates_over_sasl_ssl() {
    run_ok(
        Command::new(tool("check-jsonschema"))
            .args(["--builtin-schema", "vendor.compose-spec"])
            .arg(root().join("docker-compose.secure.yml")),
    );
    let compose = load_compose(&["docker-compose.yml", "docker-compose.secure.yml"]);
    let tmp = tempfile::tempdir().unwrap();
    let sources = BTreeMap::from([("./secrets", common::test_certs().to_path_buf())]);
    let running = run_compose(&compose, tmp.path(), &sources);
    let kcat = |user: &str, password: &str, args: &[&str]| {
        Command::new(tool("kcat"))
            .args([
                "-b",
                &running.bootstrap,
                "-X",
                "security.protocol=SASL_PLAINTEXT",
            ])
            .args(["-X", "sasl.mechanisms=PLAIN", "-X"])
            .arg(format!("sasl.username={user}"))
            .arg("-X")
            .arg(format!("sasl.password={password}"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // admin (a super user) writes with acks=all: three replicas, two must be in sync.
    let input: String = (0..100).map(|i| format!("secured-{i}\n")).collect();
    let mut p = kcat(
        "admin",
        "admin-secret",
        &["-P", "-t", "secured", "-X", "acks=all"],
    );
    p.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = kcat(
        "admin",
        "admin-secret",
        &["-C", "-t", "secured", "-e", "-o", "beginning"],
    )
    .wait_with_output()
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&read.stdout), input);
    // Every broker holds a replica that caught up: the ISR is all three.
    let meta = kcat("admin", "admin-secret", &["-L", "-J", "-t", "secured"])
        .wait_with_output()
        .unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&meta.stdout).unwrap();
    let isrs: BTreeSet<usize> = meta["topics"][0]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["isrs"].as_array().unwrap().len())
        .collect();
    assert_eq!(isrs, BTreeSet::from([3]), "{meta}");
    // alice logs in but has no ACL: refused; a wrong password does not log in.
    let alice = kcat(
        "alice",
        "alice-secret",
        &["-C", "-t", "secured", "-e", "-o", "beginning"],
    )
    .wait_with_output()
    .unwrap();
    let err = String::from_utf8_lossy(&alice.stderr);
    assert!(!alice.status.success() && err.contains("authoriz"), "{err}");
    let wrong = kcat("admin", "not-it", &["-L"]).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        !wrong.status.success() && err.contains("uthentication"),
        "{err}"
    );
    for mut b in running.brokers {
        b.assert_running();
    }
}

/// Byte-rate client quotas as Kafka applies them (KIP-13, KIP-219): with 100,000 B/s
/// for client id `cairn-tests`, a produce that takes the rate over it comes back with
/// `throttle_time_ms`, the connection is not read again until that time has passed, a
/// consumer over its quota gets an empty answer with its throttle, another client id is
/// not held back, and the throttles show under Kafka's metric names. The only time
/// checked is a lower bound the broker's mute guarantees, which a slow machine cannot
/// break.
#[test]
fn client_quotas_throttle_producers_and_consumers_and_show_in_metrics() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};

    let (broker, metrics) = start_with_metrics(&[]);
    let mut c = broker.client();
    assert_eq!(c.create_topic("quota", 1, &[]), 0);
    set_byte_rates(&mut c, "cairn-tests", 100_000.0);

    // A new usage is measured over at least 10 s: 600 KB pass, 1.2 MB are over.
    let big = "v".repeat(600_000);
    let produce = |c: &mut Client| -> i32 {
        let r: ProduceResponse = c.send(
            ApiKey::Produce,
            9,
            &Client::produce_request("quota", 0, batch(&[&big]), 1),
        );
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        r.throttle_time_ms
    };
    assert_eq!(produce(&mut c), 0);
    let sent = Instant::now();
    let throttle = produce(&mut c);
    assert!(
        (1..=2_100).contains(&throttle),
        "2 x 600 KB (and framing) within 10 s is about 200 KB over the quota, so about 2 s of \
         throttle at most, not {throttle} ms"
    );
    // KIP-219: the connection is muted, so this answer cannot come before the throttle ends.
    let _: ApiVersionsResponse = c.send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_millis(throttle as u64 - 2),
        "the muted connection answered after {waited:?}, before its {throttle} ms throttle"
    );

    // Another client id has no quota: two more such produces are not throttled.
    let mut other = Client::connect(broker.addr);
    for correlation in [1, 2] {
        let frame = cairn::wire::request_frame(
            ApiKey::Produce,
            9,
            correlation,
            "unthrottled",
            &Client::produce_request("quota", 0, batch(&[&big]), 1),
        )
        .unwrap();
        other.send_raw(&frame);
        let body = other.read_frame().expect("response");
        let r: ProduceResponse =
            cairn::wire::decode_response(ApiKey::Produce, 9, correlation, body).unwrap();
        assert_eq!(r.throttle_time_ms, 0, "a client without a quota");
    }

    // A consumer: the first batch (about 600 KB) passes, the second takes it over and
    // gets no records, only its throttle.
    let fetch_up_to = |c: &mut Client, offset: i64, max: i32| -> FetchResponse {
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(50 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name("quota"))
                .with_partitions(vec![FetchPartition::default()
                    .with_fetch_offset(offset)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_partition_max_bytes(max)])]);
        c.send(ApiKey::Fetch, 12, &req)
    };
    let fetch = |c: &mut Client, offset: i64| fetch_up_to(c, offset, 1);
    let first = fetch(&mut c, 0);
    assert_eq!(first.throttle_time_ms, 0);
    let records = first.responses[0].partitions[0].records.clone().unwrap();
    assert_eq!(common::records(records).len(), 1, "one whole batch");
    let second = fetch(&mut c, 1);
    assert!(
        (1..=2_100).contains(&second.throttle_time_ms),
        "{}",
        second.throttle_time_ms
    );
    assert!(
        second.responses.is_empty(),
        "a throttled fetch gets no records"
    );
    // The same when the fetch read several batches, which travel apart from the response
    // until it is encoded: the answer is the throttle, on the same connection.
    let third = fetch_up_to(&mut c, 1, 50 << 20);
    assert!(third.throttle_time_ms > 0, "{}", third.throttle_time_ms);
    assert!(
        third.responses.is_empty(),
        "a throttled fetch gets no records"
    );

    quota_metrics_show(
        metrics,
        &[
            "kafka_server_produce_throttle_time",
            "kafka_server_produce_byte_rate",
            "kafka_server_fetch_throttle_time",
            "kafka_server_fetch_byte_rate",
        ],
    );
}

/// Each of `names` is above 0 for client id `cairn-tests`, and client id `unthrottled`,
/// which no quota applies to, has no quota series.
fn quota_metrics_show(metrics: SocketAddr, names: &[&str]) {
    let (body, samples) = scrape(metrics);
    let usage = [("user", ""), ("client_id", "cairn-tests")];
    for name in names {
        let v = value(&samples, name, &usage);
        assert!(v.is_some_and(|v| v > 0.0), "{name} = {v:?} in\n{body}");
    }
    assert!(
        !body.contains("client_id=\"unthrottled\""),
        "a client no quota applies to has no quota metrics"
    );
}

/// `request_percentage` as Kafka applies it (KIP-124): once a client's requests have kept
/// the broker's threads busier than its quota, each response carries a throttle of at most
/// a second (the quota window's sample) and the connection is not read until it has
/// passed, and a consumer's fetch is answered without records; a client with another id
/// is not held back; `kafka_server_request_*` show the usage. The quota (0.001 % of a
/// thread: 0.1 ms over the 10 s a new usage is measured on) is one any request stream
/// exceeds; the only time checked is the lower bound the mute guarantees.
#[test]
fn request_quotas_throttle_busy_clients_for_at_most_a_second() {
    let (broker, metrics) = start_with_metrics(&[]);
    let mut c = broker.client();
    assert_eq!(c.create_topic("busy", 1, &[]), 0);
    set_client_quotas(&mut c, "cairn-tests", &[("request_percentage", 0.001)]);
    let metadata = |c: &mut Client| -> MetadataResponse {
        let req = MetadataRequest::default().with_topics(None);
        c.send(ApiKey::Metadata, 12, &req)
    };
    let mut throttled = None;
    for _ in 0..10_000 {
        // Timed from before the request: the broker starts the mute when it answers,
        // which is after this and before the client has read the answer.
        let asked = Instant::now();
        let r = metadata(&mut c);
        assert!(
            (0..=1_000).contains(&r.throttle_time_ms),
            "a request throttle is at most a second, not {} ms",
            r.throttle_time_ms
        );
        // The first throttles may be a few ms (the rate just over the quota); each later
        // request takes it further over, so the throttle soon reaches its bound.
        if r.throttle_time_ms >= 100 {
            throttled = Some((r.throttle_time_ms, asked));
            break;
        }
    }
    let (throttle, sent) = throttled.expect("10,000 requests within a 0.001 % quota");
    // KIP-219: the connection is muted, so this answer cannot come before the throttle ends
    // (less the millisecond the broker's clock rounds its start down by).
    let r = metadata(&mut c);
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_millis(throttle as u64 - 1),
        "the muted connection answered after {waited:?}, before its {throttle} ms throttle"
    );
    assert!(
        (1..=1_000).contains(&r.throttle_time_ms),
        "still over: {r:?}"
    );
    // A produce response carries it too, beside its own (byte-rate) throttle field.
    let r: ProduceResponse = c.send(
        ApiKey::Produce,
        9,
        &Client::produce_request("busy", 0, batch(&["x"]), 1),
    );
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    assert!((1..=1_000).contains(&r.throttle_time_ms), "produce: {r:?}");
    // A consumer's fetch gets its throttle and no records, as Kafka answers it.
    let fetch: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &Client::fetch_request("busy", 0, 0, 0, 0),
    );
    assert!((1..=1_000).contains(&fetch.throttle_time_ms), "{fetch:?}");
    assert!(
        fetch.responses.is_empty(),
        "a throttled fetch gets no records"
    );

    // Another client id has no quota: its requests are never throttled.
    let mut other = Client::connect(broker.addr);
    for correlation in 1..=50 {
        let frame = cairn::wire::request_frame(
            ApiKey::Metadata,
            12,
            correlation,
            "unthrottled",
            &MetadataRequest::default().with_topics(None),
        )
        .unwrap();
        other.send_raw(&frame);
        let body = other.read_frame().expect("response");
        let r: MetadataResponse =
            cairn::wire::decode_response(ApiKey::Metadata, 12, correlation, body).unwrap();
        assert_eq!(r.throttle_time_ms, 0, "a client without a quota");
    }

    quota_metrics_show(
        metrics,
        &[
            "kafka_server_request_request_time",
            "kafka_server_request_throttle_time",
        ],
    );
}
