//! A flood from hostile and greedy clients (issue 17): 10,000 connections, half of them
//! holding half-sent frames (slowloris), and many maximal fetches of a backlog at once. The
//! broker's memory must stay within a stated bound, a normal client must keep producing and
//! consuming, the greedy clients must keep being answered, and the broker must be back to
//! its quiet state once the flood stops.
//!
//! Latencies are printed (docs/FLOOD.md records them), never asserted: these machines are
//! shared and noisy.
//!
//! `bench/flood.sh` sends the same flood to Apache Kafka: with `FLOOD_BROKER=HOST:PORT` and
//! `FLOOD_BROKER_PID=PID` the test floods that broker, already running, instead of starting
//! Cairn, and counts its connections from /proc/net/tcp. The memory bound is Cairn's, so it
//! is asserted for Cairn only; every other check holds for both.
mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{batch, free_port, http_get, metric_value, name, proc_status_bytes, Broker, Client};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, BrokerId, FetchRequest, FetchResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections the flood opens: half idle after one request, half holding a frame they
/// never finish.
const CONNECTIONS: usize = 10_000;
/// Clients each sending maximal fetches of the backlog, one after another, as fast as the
/// broker answers.
const GREEDY: usize = 32;
/// The backlog they read: partitions × batches of about 1 MiB.
const PARTITIONS: i32 = 4;
const BATCHES_PER_PARTITION: usize = 18;
/// The broker's budget for fetched records not yet written to their sockets.
const FETCH_MEMORY: usize = 256 << 20;
/// What the broker may hold at its peak (VmHWM): the fetch budget, one batch beyond it per
/// greedy fetch (KIP-74: a fetch returns its first batch whatever the budget), RocksDB's and
/// the log tail's caches, and the connections' own buffers.
const MEMORY_BOUND: u64 = 1 << 30;
/// Round trips of the normal client in each phase.
const ROUNDS: usize = 200;
/// The least time the normal client spends in the flood (it goes on past `ROUNDS` until
/// then): the greedy clients run for as long as it does, so a fast normal client must not
/// make the flood a short one.
const FLOOD_SECS: u64 = 10;
/// Answers each greedy client must get in the flood: more than the first, so a broker that
/// answers once and then stalls them fails.
const GREEDY_ANSWERS_MIN: usize = 3;

/// Raises this process's open-file limit (and so the broker's, which inherits it) to
/// `need`, with util-linux's prlimit: std has no setrlimit and the crate takes no new
/// dependency for one call.
fn raise_file_limit(need: u64) {
    let pid = std::process::id().to_string();
    let out = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &pid,
            "--nofile",
            "--raw",
            "--noheadings",
            "--output=HARD",
        ])
        .output()
        .expect("prlimit (util-linux) runs");
    let hard: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(u64::MAX);
    assert!(
        hard >= need,
        "the flood needs {need} open files per process; the hard limit is {hard} (raise it with ulimit -Hn)"
    );
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={need}:{hard}")])
        .status()
        .unwrap();
    assert!(status.success(), "prlimit could not raise the file limit");
}

/// The broker flooded: Cairn, started by the test, or one already running (bench/flood.sh's
/// Apache Kafka).
enum Target {
    Cairn { broker: Broker, metrics: SocketAddr },
    Running { addr: SocketAddr, pid: u32 },
}

impl Target {
    /// `FLOOD_BROKER` and `FLOOD_BROKER_PID` if set, else a Cairn with the flood's fetch
    /// budget.
    fn from_env() -> Target {
        if let Ok(addr) = std::env::var("FLOOD_BROKER") {
            let pid = std::env::var("FLOOD_BROKER_PID")
                .expect("FLOOD_BROKER_PID goes with FLOOD_BROKER")
                .parse()
                .expect("FLOOD_BROKER_PID is a pid");
            return Target::Running {
                addr: addr.parse().expect("FLOOD_BROKER is HOST:PORT"),
                pid,
            };
        }
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let broker = Broker::start_with(&[
            &format!("metrics.listener={metrics}"),
            &format!("fetch.memory.max.bytes={FETCH_MEMORY}"),
        ]);
        Target::Cairn { broker, metrics }
    }

    fn addr(&self) -> SocketAddr {
        match self {
            Target::Cairn { broker, .. } => broker.addr,
            Target::Running { addr, .. } => *addr,
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Target::Cairn { broker, .. } => broker.child.as_ref().unwrap().id(),
            Target::Running { pid, .. } => *pid,
        }
    }

    /// The connections the broker holds: Cairn's own count, or the established TCP
    /// connections whose local end is the broker's port.
    fn connections(&self) -> f64 {
        match self {
            Target::Cairn { metrics, .. } => {
                let (_, text) = http_get(*metrics, "/metrics");
                metric_value(
                    &text,
                    "kafka_server_socket_server_metrics_connection_count",
                    &[("listener", "PLAINTEXT")],
                )
                .unwrap_or(0.0)
            }
            Target::Running { addr, .. } => established_to(addr.port()) as f64,
        }
    }
}

/// Established TCP connections (IPv4 and IPv6) whose local port is `port`.
fn established_to(port: u16) -> usize {
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .map(|table| {
            table
                .lines()
                .skip(1)
                .filter(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.len() > 3 && f[1].ends_with(&local) && f[3] == "01"
                })
                .count()
        })
        .sum()
}

/// A process's CPU time so far (user and system), from /proc/PID/stat.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 of `rest`.
    let ticks: u64 = rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// Waits (at most `secs`) until the broker's count of open connections is `done`;
/// fails with `what` of the last count.
fn await_connections(
    target: &Target,
    secs: u64,
    done: impl Fn(f64) -> bool,
    what: impl Fn(f64) -> String,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let n = target.connections();
        if done(n) {
            return;
        }
        assert!(Instant::now() < deadline, "{}", what(n));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Latencies of one phase of the normal client: each round produces one record (acks=1),
/// fetches it back, and fetches one old batch of the backlog as a consumer catching up
/// would.
struct Phase {
    produce: Vec<Duration>,
    fetch: Vec<Duration>,
    history: Vec<Duration>,
}

impl Phase {
    fn line(&self, name: &str) -> String {
        let q = |v: &[Duration], p: f64| {
            let mut v = v.to_vec();
            v.sort();
            let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
            v[i].as_secs_f64() * 1000.0
        };
        format!(
            "{name:<7} {:5} rounds: produce p50 {:7.2} ms p99 {:7.2} ms max {:7.2} ms | fetch p50 {:7.2} ms p99 {:7.2} ms max {:7.2} ms | old batch p50 {:7.2} ms p99 {:7.2} ms max {:7.2} ms",
            self.produce.len(),
            q(&self.produce, 0.5),
            q(&self.produce, 0.99),
            q(&self.produce, 1.0),
            q(&self.fetch, 0.5),
            q(&self.fetch, 0.99),
            q(&self.fetch, 1.0),
            q(&self.history, 0.5),
            q(&self.history, 0.99),
            q(&self.history, 1.0),
        )
    }
}

/// The normal client: produce-then-fetch round trips on the `steady` topic, every record
/// read back as written, each followed by a fetch of one old batch of the backlog (from the
/// store: the tail cache holds a partition's newest 2 MiB); `ROUNDS` of them and more until
/// `least` has passed.
fn steady_rounds(c: &mut Client, phase: &str, least: Duration) -> Phase {
    let mut out = Phase {
        produce: Vec::new(),
        fetch: Vec::new(),
        history: Vec::new(),
    };
    let started = Instant::now();
    for i in 0.. {
        if i >= ROUNDS && started.elapsed() >= least {
            break;
        }
        let value = format!("{phase}-{i}");
        let t = Instant::now();
        let (err, offset) = c.produce("steady", 0, batch(&[&value]), 1);
        out.produce.push(t.elapsed());
        assert_eq!(err, 0, "{phase}: produce {i} failed");
        let t = Instant::now();
        let (err, _, records) = c.fetch("steady", 0, offset);
        out.fetch.push(t.elapsed());
        assert_eq!(err, 0, "{phase}: fetch {i} failed");
        assert_eq!(
            records.first(),
            Some(&(offset, value)),
            "{phase}: round {i}"
        );
        let partition = i as i32 % PARTITIONS;
        let old = ((i / PARTITIONS as usize) % (BATCHES_PER_PARTITION / 2) * 1000) as i64;
        let t = Instant::now();
        let resp: FetchResponse = c.send(
            ApiKey::Fetch,
            12,
            &Client::fetch_request("backlog", partition, old, 0, 0),
        );
        out.history.push(t.elapsed());
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "{phase}: old batch {i} failed");
        let records = p.records.as_deref().unwrap_or_default();
        assert!(
            records.len() > 100 << 10 && records[..8] == old.to_be_bytes(),
            "{phase}: round {i} did not get the batch at {old} of partition {partition}"
        );
    }
    out
}

/// Produces one batch (acks=1), trying again for a while while the partition has no leader
/// yet: a broker may answer a topic's creation before its partitions are led (Kafka does).
/// The error code of the last try.
fn produce_once_led(c: &mut Client, topic: &str, partition: i32, records: Bytes) -> i16 {
    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    const LEADER_NOT_AVAILABLE: i16 = 5;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (err, _) = c.produce(topic, partition, records.clone(), 1);
        let unled = [
            NOT_LEADER_OR_FOLLOWER,
            UNKNOWN_TOPIC_OR_PARTITION,
            LEADER_NOT_AVAILABLE,
        ];
        if !unled.contains(&err) || Instant::now() > deadline {
            return err;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The topic `backlog`: `PARTITIONS` × `BATCHES_PER_PARTITION` batches of 1,000 × 1 KB
/// records; its size in bytes.
fn backlog(c: &mut Client) -> usize {
    assert_eq!(c.create_topic("backlog", PARTITIONS, &[]), 0);
    let value = "x".repeat(1000);
    let values: Vec<&str> = (0..1000).map(|_| value.as_str()).collect();
    let mut bytes = 0;
    for p in 0..PARTITIONS {
        for _ in 0..BATCHES_PER_PARTITION {
            let b = batch(&values);
            bytes += b.len();
            assert_eq!(produce_once_led(c, "backlog", p, b), 0);
        }
    }
    bytes
}

/// A fetch of the whole backlog, every partition from offset 0, as large as the broker
/// allows, framed.
fn maximal_fetch(correlation: i32) -> Bytes {
    cairn::wire::request_frame(
        ApiKey::Fetch,
        12,
        correlation,
        "greedy",
        &maximal_fetch_request(),
    )
    .unwrap()
}

fn maximal_fetch_request() -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(i32::MAX)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name("backlog"))
            .with_partitions(
                (0..PARTITIONS)
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(0)
                            .with_current_leader_epoch(-1)
                            .with_last_fetched_epoch(-1)
                            .with_partition_max_bytes(i32::MAX)
                    })
                    .collect(),
            )])
}

/// Reads one response frame, throwing its bytes away as they come; its length.
async fn skip_frame(s: &mut TcpStream, scratch: &mut [u8]) -> std::io::Result<usize> {
    let len = s.read_i32().await? as usize;
    let mut left = len;
    while left > 0 {
        let n = left.min(scratch.len());
        s.read_exact(&mut scratch[..n]).await?;
        left -= n;
    }
    Ok(len)
}

/// How long the flood's clients wait for the broker (a connect, an answer) before the test
/// fails rather than hangs: far beyond any answer seen, so only a broker that stopped serving
/// them hits it.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

async fn answered_within<T>(f: impl std::future::Future<Output = T>, what: &str) -> T {
    tokio::time::timeout(ANSWER_WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("the broker did not answer {what} within {ANSWER_WAIT:?}"))
}

/// What half of the slowloris connections claim as their frame's length: the largest frame
/// Cairn takes (`socket.request.max.bytes`, 100 MiB), or `FLOOD_LARGE_CLAIM` bytes
/// (bench/flood.sh: Kafka without `queued.max.request.bytes` allocates a claimed frame's
/// whole buffer at once, so its 1 GiB heap runs out under 100 MiB claims).
fn large_claim() -> i32 {
    std::env::var("FLOOD_LARGE_CLAIM").map_or(100 << 20, |v| {
        v.parse().expect("FLOOD_LARGE_CLAIM is a byte count")
    })
}

struct Flood {
    /// Held open until the flood ends.
    held: Vec<TcpStream>,
    greedy: Vec<tokio::task::JoinHandle<(usize, usize)>>,
}

/// Opens the connections (a few hundred connects at a time, as a crowd of clients would)
/// and starts the greedy fetchers.
async fn flood(addr: SocketAddr, stop: Arc<AtomicBool>, fetched: Arc<AtomicUsize>) -> Flood {
    let api_versions = cairn::wire::request_frame(
        ApiKey::ApiVersions,
        3,
        1,
        "idle",
        &ApiVersionsRequest::default(),
    )
    .unwrap();
    let large_claim = large_claim();
    let mut held = Vec::with_capacity(CONNECTIONS);
    for wave in 0..CONNECTIONS / 250 {
        let mut joins = Vec::new();
        for i in 0..250 {
            let n = wave * 250 + i;
            let api_versions = api_versions.clone();
            joins.push(tokio::spawn(async move {
                let mut s = answered_within(TcpStream::connect(addr), "a connect")
                    .await
                    .expect("connect");
                if n % 2 == 0 {
                    // Idle: one request answered, then nothing.
                    s.write_all(&api_versions).await.unwrap();
                    let mut scratch = [0u8; 4096];
                    let len = answered_within(skip_frame(&mut s, &mut scratch), "ApiVersions")
                        .await
                        .expect("ApiVersions answered");
                    assert!(len > 8, "ApiVersions answered");
                } else {
                    // Slowloris: a length prefix and a few bytes of the frame. Every other
                    // one claims the largest frame the broker takes (socket.request.max.bytes).
                    let claim: i32 = if n % 4 == 1 { 200 } else { large_claim };
                    s.write_all(&claim.to_be_bytes()).await.unwrap();
                    s.write_all(&api_versions[4..14]).await.unwrap();
                }
                s
            }));
        }
        for j in joins {
            held.push(j.await.unwrap());
        }
    }
    let mut greedy = Vec::with_capacity(GREEDY);
    for _ in 0..GREEDY {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let (stop, fetched) = (stop.clone(), fetched.clone());
        greedy.push(tokio::spawn(async move {
            let mut scratch = vec![0u8; 1 << 20];
            let (mut responses, mut largest) = (0, 0);
            let mut correlation = 0;
            while !stop.load(Ordering::Relaxed) {
                correlation += 1;
                s.write_all(&maximal_fetch(correlation)).await.unwrap();
                let len = answered_within(skip_frame(&mut s, &mut scratch), "a greedy fetch")
                    .await
                    .expect("fetch answered");
                fetched.fetch_add(len, Ordering::Relaxed);
                responses += 1;
                largest = largest.max(len);
            }
            (responses, largest)
        }));
    }
    Flood { held, greedy }
}

#[test]
fn a_flood_of_connections_and_fetches_leaves_a_normal_client_served_within_a_memory_bound() {
    raise_file_limit(CONNECTIONS as u64 + GREEDY as u64 + 2_000);
    let target = Target::from_env();
    let pid = target.pid();
    let mut c = Client::connect(target.addr());
    let backlog = backlog(&mut c);
    assert_eq!(c.create_topic("steady", 1, &[]), 0);
    assert_eq!(produce_once_led(&mut c, "steady", 0, batch(&["first"])), 0);

    let quiet = steady_rounds(&mut c, "quiet", Duration::ZERO);
    let connections_quiet = target.connections();
    let rss_quiet = proc_status_bytes(pid, "VmRSS");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let fetched = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let cpu_before = cpu_secs(pid);
    let flood = rt.block_on(flood(target.addr(), stop.clone(), fetched.clone()));
    let opened_in = started.elapsed();
    // Every connection of the flood is accepted and held (the last ones' tasks may be a
    // moment behind their connect).
    let flooded = connections_quiet + (CONNECTIONS + GREEDY) as f64;
    await_connections(
        &target,
        30,
        |n| n >= flooded,
        |n| {
            format!("the broker holds {n} connections, not all {CONNECTIONS} of the flood and the {GREEDY} greedy ones")
        },
    );
    let during = steady_rounds(&mut c, "flood", Duration::from_secs(FLOOD_SECS));
    stop.store(true, Ordering::Relaxed);
    let greedy: Vec<(usize, usize)> = flood
        .greedy
        .into_iter()
        .map(|g| rt.block_on(g).unwrap())
        .collect();
    let flood_secs = started.elapsed().as_secs_f64();
    let flood_cpu = cpu_secs(pid) - cpu_before;
    let peak = proc_status_bytes(pid, "VmHWM");
    let rss_flood = proc_status_bytes(pid, "VmRSS");
    drop(flood.held);
    drop(rt);

    // Recovery: every flood connection is let go, and the normal client is served as before.
    await_connections(
        &target,
        60,
        |n| n <= connections_quiet,
        |n| {
            format!("the broker still counts {n} connections a minute after the flood ended (before it: {connections_quiet})")
        },
    );
    let after = steady_rounds(&mut c, "after", Duration::ZERO);
    let rss_after = proc_status_bytes(pid, "VmRSS");

    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let responses: usize = greedy.iter().map(|g| g.0).sum();
    let largest = greedy.iter().map(|g| g.1).max().unwrap_or(0);
    let fewest = greedy.iter().map(|g| g.0).min().unwrap_or(0);
    println!(
        "flood: {CONNECTIONS} connections opened in {:.1} s; {GREEDY} greedy clients got {responses} fetch responses (each at least {fewest}), {:.0} MiB in all, the largest {:.1} MiB, of a {:.1} MiB backlog, over {flood_secs:.1} s",
        opened_in.as_secs_f64(),
        mib(fetched.load(Ordering::Relaxed) as u64),
        mib(largest as u64),
        mib(backlog as u64),
    );
    println!(
        "broker: {} (pid {pid}); {flood_cpu:.1} s of its CPU over the flood's {flood_secs:.1} s",
        match target {
            Target::Cairn { .. } => "Cairn",
            Target::Running { .. } => "running already (FLOOD_BROKER)",
        }
    );
    println!("{}", quiet.line("quiet"));
    println!("{}", during.line("flood"));
    println!("{}", after.line("after"));
    println!(
        "broker memory: resident {:.0} MiB quiet, {:.0} MiB at the flood's end, {:.0} MiB after; peak {:.0} MiB (bound {:.0} MiB, fetch budget {:.0} MiB)",
        mib(rss_quiet),
        mib(rss_flood),
        mib(rss_after),
        mib(peak),
        mib(MEMORY_BOUND),
        mib(FETCH_MEMORY as u64),
    );
    for (i, (n, largest)) in greedy.iter().enumerate() {
        // An answer without records is about 100 bytes; one batch of the backlog is 1 MB.
        assert!(*largest > 100 << 10, "greedy client {i} got no records");
        assert!(
            *n >= GREEDY_ANSWERS_MIN,
            "greedy client {i} got {n} answers in the flood's {flood_secs:.1} s, fewer than {GREEDY_ANSWERS_MIN}"
        );
    }
    assert!(
        matches!(target, Target::Running { .. }) || peak <= MEMORY_BOUND,
        "the broker's peak resident memory was {:.0} MiB, over the bound of {:.0} MiB",
        mib(peak),
        mib(MEMORY_BOUND)
    );
}

/// Clients that send fetches and never read the answers, each with a small receive buffer.
/// Kafka mutes a connection from a request until its response is sent, so such a client
/// holds one response; Cairn reads ahead while it writes, but past a few unsent bytes it
/// waits as Kafka does. So each stalled client holds one response's records, the fetch
/// memory budget stays with the clients that read (a reader's maximal fetch still gets its
/// full size), and a stalled connection is closed after `connections.max.idle.ms` with no
/// response written, as Kafka closes an idle one, which gives its records back.
#[test]
fn clients_that_stop_reading_hold_one_response_each_until_the_idle_timeout() {
    /// Stalled clients, and the fetches each sends without reading.
    const STALLED: usize = 2;
    const PIPELINED: usize = 6;
    /// fetch.max.bytes, Kafka's default: the most one response carries.
    const RESPONSE_MAX: usize = 50 << 20;
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let broker = Broker::start_with(&[
        &format!("metrics.listener={metrics}"),
        &format!("fetch.memory.max.bytes={FETCH_MEMORY}"),
        &format!("fetch.max.bytes={RESPONSE_MAX}"),
        "connections.max.idle.ms=10000",
    ]);
    let scrape = |name: &str, labels: &[(&str, &str)]| {
        let (_, text) = http_get(metrics, "/metrics");
        metric_value(&text, name, labels).unwrap_or(0.0)
    };
    let held = || scrape("cairn_fetch_memory_held_bytes", &[]);
    let connections = || {
        scrape(
            "kafka_server_socket_server_metrics_connection_count",
            &[("listener", "PLAINTEXT")],
        )
    };
    let mut c = broker.client();
    let backlog = backlog(&mut c);
    drop(c);
    assert!(
        backlog > RESPONSE_MAX,
        "each maximal fetch is answered in full"
    );
    let baseline = connections();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stalled_at = Instant::now();
    let stalled: Vec<TcpStream> = rt.block_on(async {
        let mut out = Vec::new();
        for _ in 0..STALLED {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(4096).unwrap();
            let mut s = socket.connect(broker.addr).await.unwrap();
            for correlation in 0..PIPELINED {
                s.write_all(&maximal_fetch(correlation as i32))
                    .await
                    .unwrap();
            }
            out.push(s);
        }
        out
    });
    // What they hold once the broker has written all it can: sampled until it is the same
    // twice in a row a second apart.
    let mut last = -1.0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let stuck = loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = held();
        if now > 0.0 && now == last {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the fetch memory held never settled"
        );
        last = now;
    };
    // A reader meanwhile: its maximal fetch is answered in full, not with the first batch
    // of each partition that a fetch gets when the budget is all held.
    let mut reader = Client::connect(broker.addr);
    let resp: FetchResponse = reader.send(ApiKey::Fetch, 12, &maximal_fetch_request());
    let read: usize = resp.responses[0]
        .partitions
        .iter()
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .sum();
    drop(reader);
    let mib = |b: f64| b / (1 << 20) as f64;
    println!(
        "{STALLED} clients with {PIPELINED} fetches each, unread: {:.1} MiB of fetched records held (budget {:.0} MiB); a reader's maximal fetch got {:.1} MiB",
        mib(stuck),
        mib(FETCH_MEMORY as f64),
        mib(read as f64),
    );
    assert!(
        stuck <= (STALLED * RESPONSE_MAX) as f64,
        "{STALLED} clients that stopped reading hold {:.1} MiB of fetched records, more than one response ({:.0} MiB) each",
        mib(stuck),
        mib(RESPONSE_MAX as f64),
    );
    assert!(
        read > RESPONSE_MAX - (2 << 20),
        "a reader's maximal fetch got {:.1} MiB, not the {:.0} MiB it asked for, while clients that stopped reading hold {:.1} MiB",
        mib(read as f64),
        mib(RESPONSE_MAX as f64),
        mib(stuck),
    );

    // connections.max.idle.ms later, with nothing read, the broker has let them go.
    let deadline = Instant::now() + Duration::from_secs(120);
    while connections() > baseline || held() > 0.0 {
        assert!(
            Instant::now() < deadline,
            "two minutes on, the broker still holds {} connections (before: {baseline}) and {:.1} MiB of fetched records",
            connections(),
            mib(held()),
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    println!(
        "the broker let them go {:.1} s after they sent their fetches (connections.max.idle.ms 10 s)",
        stalled_at.elapsed().as_secs_f64()
    );
    drop(stalled);
}
