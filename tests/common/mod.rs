//! Test support: starts the real `cairn` binary on a free port with its own data dir, and a
//! small blocking Kafka client built on kafka-protocol to talk to it.
#![allow(dead_code)]

pub mod share;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// A running broker process; killed when dropped.
pub struct Broker {
    pub child: Option<Child>,
    pub addr: SocketAddr,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    extra: Vec<String>,
}

/// Whether something listens at `addr`. A connection to a port nobody listens on can
/// succeed by connecting to itself (TCP simultaneous open, when the kernel picks that same
/// port as the source port); that one does not count.
pub fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect(addr).is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok())
}

/// A figure of a process's /proc/PID/status, in bytes (VmRSS, VmHWM).
pub fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
        * 1024
}

/// A loopback port no other broker of this test process has been given. Tests run in
/// parallel, and the OS may hand the same just-released port to two of them.
pub fn free_port() -> u16 {
    static TAKEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
        if !taken.contains(&port) {
            taken.push(port);
            return port;
        }
    }
}

/// The test certificates (scripts/make-test-certs.sh: a CA, the broker's certificate for
/// 127.0.0.1/localhost, clients' ones), made once per test binary run in a temp dir of its own.
pub fn test_certs() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("cairn-tls-{}", std::process::id()));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/make-test-certs.sh");
        let out = Command::new("bash").arg(script).arg(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "make-test-certs.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

impl Broker {
    pub fn start() -> Broker {
        Self::start_with(&[])
    }

    pub fn start_with(overrides: &[&str]) -> Broker {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let mut b = Broker {
            child: None,
            addr: "127.0.0.1:1".parse().unwrap(),
            dir,
            _tmp: Some(tmp),
            extra: overrides.iter().map(|s| s.to_string()).collect(),
        };
        b.spawn(free_port());
        b
    }

    /// Starts on an existing data dir (which the test owns).
    pub fn start_in(dir: &Path, overrides: &[&str]) -> Broker {
        let mut b = Self::launch_in(dir, free_port(), overrides);
        b.await_listening();
        b
    }

    /// Starts a node of a cluster in `dir` whose client listener is on `port` (`overrides`
    /// name its other listeners), without waiting for it: a node may listen only once a
    /// quorum of its controllers is up. Call [`Broker::await_listening`] once all are started.
    pub fn launch_in(dir: &Path, port: u16, overrides: &[&str]) -> Broker {
        let mut b = Broker {
            child: None,
            addr: "127.0.0.1:1".parse().unwrap(),
            dir: dir.to_path_buf(),
            _tmp: None,
            extra: overrides.iter().map(|s| s.to_string()).collect(),
        };
        b.launch(port);
        b
    }

    fn spawn(&mut self, port: u16) {
        self.launch(port);
        self.await_listening();
    }

    fn launch(&mut self, port: u16) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
        cmd.arg("--override")
            .arg(format!("listeners=PLAINTEXT://127.0.0.1:{port}"))
            .arg("--override")
            .arg(format!("log.dirs={}", self.dir.display()))
            .arg("--override")
            .arg("metrics.listener=none");
        for o in &self.extra {
            cmd.arg("--override").arg(o);
        }
        cmd.env("CAIRN_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let child = cmd.spawn().expect("start cairn");
        self.child = Some(child);
        self.addr = format!("127.0.0.1:{port}").parse().unwrap();
    }

    /// Waits (bounded) until the broker listens on its client port.
    pub fn await_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !listening(self.addr) {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("cairn exited during start-up: {status}");
            }
            assert!(Instant::now() < deadline, "cairn did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whoever answered must be our process, not another broker on a reused port.
        std::thread::sleep(Duration::from_millis(50));
        if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
            panic!("cairn exited right after start-up: {status}");
        }
    }

    /// Stops with SIGTERM and waits; returns the exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        signal(&child, "TERM");
        let status = child.wait().unwrap();
        status.code()
    }

    /// kill -9, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Starts again on the same port and data dir.
    pub fn restart(&mut self) {
        let port = self.addr.port();
        self.spawn(port);
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

/// Starts the binary with `overrides` (and no metrics listener) and checks that it refuses
/// to start as a config error: exit code 2, every one of `expected` in its message, and
/// `secret` nowhere in it.
pub fn refuses_to_start(overrides: &[&str], expected: &[&str], secret: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["--override", "metrics.listener=none"])
        .args(overrides.iter().flat_map(|o| ["--override", o]))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{overrides:?}: {err}");
    for e in expected {
        assert!(err.contains(e), "{overrides:?}: {e} not in {err}");
    }
    assert!(!err.contains(secret), "a secret was printed: {err}");
}

pub fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} failed");
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// What a [`Client`] talks over: a TCP stream, or a TLS one.
pub trait Conn: Read + Write + Send {}
impl<T: Read + Write + Send> Conn for T {}

/// A blocking Kafka client that sends one request at a time.
pub struct Client {
    pub stream: Box<dyn Conn>,
    correlation: i32,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        Client::over(Box::new(Self::tcp(addr)))
    }

    /// A TCP connection to `addr` with the tests' read timeout.
    pub fn tcp(addr: SocketAddr) -> TcpStream {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream
    }

    /// A client over an established stream (a TLS one, say).
    pub fn over(stream: Box<dyn Conn>) -> Client {
        Client {
            stream,
            correlation: 0,
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Encodes a request frame.
    pub fn frame<Req: Encodable>(&mut self, api: ApiKey, version: i16, req: &Req) -> Bytes {
        self.correlation += 1;
        cairn::wire::request_frame(api, version, self.correlation, "cairn-tests", req).unwrap()
    }

    pub fn send<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Resp {
        let frame = self.frame(api, version, req);
        self.send_raw(&frame);
        let body = self.read_frame().expect("response");
        // The correlation id is checked: responses come in request order.
        cairn::wire::decode_response(api, version, self.correlation, body).unwrap()
    }

    /// Sends without waiting for a response (acks=0, pipelining).
    pub fn send_only<Req: Encodable>(&mut self, api: ApiKey, version: i16, req: &Req) -> i32 {
        let frame = self.frame(api, version, req);
        self.send_raw(&frame);
        self.correlation
    }

    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).ok()?;
        let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut buf).ok()?;
        Some(Bytes::from(buf))
    }

    /// Waits (bounded) until the broker coordinates groups, as a client's first
    /// FindCoordinator finds out: the first one creates `__consumer_offsets`, then the
    /// coordinator loads its partitions (ListGroups answers COORDINATOR_LOAD_IN_PROGRESS
    /// until every one is loaded). Call it after each start of the broker.
    pub fn await_group_coordinator(&mut self) {
        use kafka_protocol::messages::{
            FindCoordinatorRequest, FindCoordinatorResponse, ListGroupsRequest, ListGroupsResponse,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r: FindCoordinatorResponse = self.send(
                ApiKey::FindCoordinator,
                3,
                &FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("any")),
            );
            if r.error_code == 0 {
                let l: ListGroupsResponse =
                    self.send(ApiKey::ListGroups, 4, &ListGroupsRequest::default());
                if l.error_code == 0 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the group coordinator did not become available"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True when the broker has closed this connection.
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }
}

/// A valid v2 batch of `values` (keys "k<i>"), built by kafka-protocol's encoder.
pub fn batch(values: &[&str]) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    batch_with(values, -1, -1, -1, now)
}

pub fn batch_with(
    values: &[&str],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    timestamp: i64,
) -> Bytes {
    batch_of(
        values,
        producer_id,
        producer_epoch,
        base_sequence,
        timestamp,
        false,
    )
}

/// A transactional batch of `values` from `producer_id` at `producer_epoch`.
pub fn txn_batch(
    values: &[&str],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> Bytes {
    batch_of(
        values,
        producer_id,
        producer_epoch,
        base_sequence,
        1_000,
        true,
    )
}

fn batch_of(
    values: &[&str],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    timestamp: i64,
    transactional: bool,
) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // kafka-protocol's encoder groups records whose offset minus sequence is constant.
            sequence: base_sequence.wrapping_add(i as i32),
            timestamp: timestamp + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(v.to_string())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

/// Decodes every record in fetched bytes: (offset, value).
pub fn records(mut bytes: Bytes) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        for r in set.records {
            out.push((
                r.offset,
                String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap(),
            ));
        }
    }
    out
}

pub fn data_dir_exists(p: &Path) -> bool {
    p.join("CURRENT").exists()
}

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse,
    ListOffsetsRequest, ListOffsetsResponse, ProduceRequest, ProduceResponse, TopicName,
};

pub fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

impl Client {
    pub fn create_topic(&mut self, topic: &str, partitions: i32, configs: &[(&str, &str)]) -> i16 {
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(partitions)
                .with_replication_factor(1)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                )]);
        let resp: CreateTopicsResponse = self.send(ApiKey::CreateTopics, 7, &req);
        resp.topics[0].error_code
    }

    pub fn produce_request(
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> ProduceRequest {
        ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(records))])])
    }

    /// Produces one batch; returns (error code, base offset).
    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> (i16, i64) {
        let resp: ProduceResponse = self.send(
            ApiKey::Produce,
            9,
            &Self::produce_request(topic, partition, records, acks),
        );
        let p = &resp.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    }

    pub fn fetch_request(
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
        min_bytes: i32,
    ) -> FetchRequest {
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(min_bytes)
            .with_max_bytes(50 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_partition_max_bytes(1 << 20)])])
    }

    /// Fetches from an offset: (error code, high watermark, records as (offset, value)).
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> (i16, i64, Vec<(i64, String)>) {
        let resp: FetchResponse = self.send(
            ApiKey::Fetch,
            12,
            &Self::fetch_request(topic, partition, offset, 0, 0),
        );
        let p = &resp.responses[0].partitions[0];
        let recs = p.records.clone().expect("records are never null");
        (p.error_code, p.high_watermark, records(recs))
    }

    /// ListOffsets for one partition: (error, offset, timestamp).
    pub fn list_offset(&mut self, topic: &str, partition: i32, timestamp: i64) -> (i16, i64, i64) {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(timestamp)])]);
        let resp: ListOffsetsResponse = self.send(ApiKey::ListOffsets, 8, &req);
        let p = &resp.topics[0].partitions[0];
        (p.error_code, p.offset, p.timestamp)
    }
}

/// A plain HTTP/1.0 GET: (status, body).
/// IncrementalAlterConfigs on one resource (`resource_type`: [`TOPIC`], [`BROKER`] with
/// "" for the cluster's defaults, 32 for a group), ops as (name, operation, value):
/// (error code, message).
pub fn alter_configs(
    c: &mut Client,
    resource_type: i8,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> (i16, Option<String>) {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{
        IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let req = IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configs(
                ops.iter()
                    .map(|(k, op, v)| {
                        AlterableConfig::default()
                            .with_name(s(k))
                            .with_config_operation(*op)
                            .with_value(v.map(s))
                    })
                    .collect(),
            )]);
    let r: IncrementalAlterConfigsResponse = c.send(ApiKey::IncrementalAlterConfigs, 1, &req);
    let r = &r.responses[0];
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

/// [`alter_configs`] on a broker resource (`name` "" for the cluster's defaults).
pub fn alter_broker(
    c: &mut Client,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
) -> (i16, Option<String>) {
    alter_configs(c, BROKER, name, ops, false)
}

/// DescribeConfigs of one resource, every key: (name, value, config_source, read_only).
pub fn describe_configs(
    c: &mut Client,
    resource_type: i8,
    name: &str,
) -> Vec<(String, String, i8, bool)> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configuration_keys(None)]);
    let r: DescribeConfigsResponse = c.send(ApiKey::DescribeConfigs, 4, &req);
    assert_eq!(
        r.results[0].error_code, 0,
        "{:?}",
        r.results[0].error_message
    );
    r.results[0]
        .configs
        .iter()
        .map(|e| {
            (
                e.name.to_string(),
                e.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                e.config_source,
                e.read_only,
            )
        })
        .collect()
}

/// DescribeConfigs of one key: (value, config_source, read_only), None when not listed.
pub fn describe_key(
    c: &mut Client,
    resource_type: i8,
    name: &str,
    key: &str,
) -> Option<(String, i8, bool)> {
    describe_configs(c, resource_type, name)
        .into_iter()
        .find(|e| e.0 == key)
        .map(|(_, value, source, read_only)| (value, source, read_only))
}

/// IncrementalAlterConfigs operations and DescribeConfigs resource types.
pub const SET: i8 = 0;
pub const DELETE: i8 = 1;
pub const TOPIC: i8 = 2;
pub const BROKER: i8 = 4;

pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_http_get(addr, path).unwrap_or_else(|e| panic!("GET {addr}{path}: {e}"))
}

pub fn try_http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// One sample's value in Prometheus text `text`: the series `name` whose labels include
/// `labels`.
pub fn metric_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|(_, v)| v.parse().ok())
}
