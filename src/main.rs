//! The `cairn` binary: `cairn [server.properties] [--override key=value]...`, like
//! `kafka-server-start.sh`. Config, then telemetry, storage, listeners; runs until SIGTERM or
//! SIGINT, then stops accepting, lets connections finish the request in hand, syncs storage
//! and exits 0.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use tracing_subscriber::EnvFilter;

use cairn::broker::Broker;
use cairn::config::Config;

/// Time connections get to finish their requests at shutdown.
const SHUTDOWN_GRACE_MS: u64 = 10_000;

#[derive(Parser)]
#[command(name = "cairn", version, about = "A Kafka-compatible message broker")]
struct Args {
    /// A server.properties file (Kafka's format and keys).
    config: Option<PathBuf>,
    /// Overrides a config key, e.g. --override log.dirs=/var/lib/cairn (repeatable).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

/// mimalloc, with the largest blocks mapped from the kernel (see the module).
#[global_allocator]
static ALLOCATOR: cairn::allocator::Allocator = cairn::allocator::Allocator;

fn main() -> ExitCode {
    let started = Instant::now();
    cairn::allocator::keep_c_heap();
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("healthcheck") {
        return healthcheck(argv.get(2).map(String::as_str));
    }
    if argv.get(1).map(String::as_str) == Some("dump-log") {
        return dump_log(&argv[2..]);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("CAIRN_LOG")
                .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = match Config::load(args.config.as_deref(), std::env::vars(), &args.overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cairn: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    // The TLS listeners' stores are read now: a bad file or password is a config error.
    let tls = match cairn::server::load_tls(&config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cairn: configuration error: {e:#}");
            return ExitCode::from(2);
        }
    };
    // So is the inter-broker listener's truststore, which this broker checks the others with.
    let dial = match cairn::dial::Dialer::new(&config) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cairn: configuration error: {e:#}");
            return ExitCode::from(2);
        }
    };
    // And the controller listener's, when the quorum speaks TLS.
    let quorum_tls = match (
        &config.controller_ssl,
        config.cluster.controller_listeners.first(),
    ) {
        (Some(s), Some(l)) => match cairn::tls::Mutual::load(&l.name, s) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("cairn: configuration error: {e:#}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cairn: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config, tls, dial, quorum_tls, started)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    config: Config,
    tls: BTreeMap<String, cairn::server::tls::Tls>,
    dial: cairn::dial::Dialer,
    quorum_tls: Option<cairn::tls::Mutual>,
    started: Instant,
) -> anyhow::Result<()> {
    let log_dirs = config.log_dirs.clone();
    let broker = tokio::task::spawn_blocking(move || Broker::open(config, cairn::dispatch::APIS))
        .await?
        .map_err(|e| {
            let dirs: Vec<String> = log_dirs.iter().map(|d| d.display().to_string()).collect();
            anyhow::anyhow!("cannot open storage in {}: {e}", dirs.join(","))
        })?;
    let metrics = match broker.config.metrics_listener {
        Some(addr) => Some(cairn::scrape::bind(addr).await?),
        None => None,
    };
    // Every node is a voter of the metadata quorum and a broker (Kafka's combined mode):
    // alone, a quorum of one; with `controller.quorum.voters`, one of them, listening for
    // the others on the controller listener.
    let controller_listener = match broker.config.cluster.controller_listeners.first() {
        Some(l) if !broker.config.cluster.voters.is_empty() => Some(
            tokio::net::TcpListener::bind(l.bind_addr())
                .await
                .map_err(|e| {
                    anyhow::anyhow!("cannot listen on {}:{} ({}): {e}", l.host, l.port, l.name)
                })?,
        ),
        _ => None,
    };
    let cluster = broker
        .start_cluster(controller_listener, dial, quorum_tls)
        .await?;
    let listeners = cairn::server::bind(&broker, tls).await?;
    for l in &listeners {
        broker.metrics.listener_bound(&l.name);
    }
    // As Kafka's broker: clients are served once this broker is registered and unfenced
    // (they queue on the bound listeners until then).
    tokio::select! {
        _ = cluster.await_running() => {}
        r = wait_for_signal() => {
            r?;
            tracing::info!("stopped before joining the cluster");
            cluster.controller.shutdown().await;
            return broker.sync().map_err(|e| anyhow::anyhow!("cannot sync storage at shutdown: {e}"));
        }
    }
    broker.set_ready();
    tracing::info!(
        node_id = broker.node_id(),
        cluster_id = %broker.cluster_id(),
        log_dirs = ?broker.config.log_dirs,
        startup_ms = started.elapsed().as_millis() as u64,
        "cairn started"
    );
    let serving = tokio::spawn(cairn::server::serve(broker.clone(), listeners));
    let metrics = metrics.map(|l| tokio::spawn(cairn::scrape::serve(broker.clone(), l)));
    let retention = tokio::spawn(broker.clone().run_retention());
    let producer_expiration = tokio::spawn(broker.clone().run_producer_expiration());
    let cleaner = tokio::spawn(broker.clone().run_log_cleaner());
    let groups = tokio::spawn(broker.groups.clone().run(broker.shutdown_signal()));

    wait_for_signal().await?;
    tracing::info!("controlled shutdown: moving leaderships to other brokers");
    cluster
        .controlled_shutdown(Duration::from_millis(SHUTDOWN_GRACE_MS))
        .await;
    tracing::info!("shutting down: no new connections, finishing requests in flight");
    broker.begin_shutdown();
    if tokio::time::timeout(Duration::from_millis(SHUTDOWN_GRACE_MS), serving)
        .await
        .is_err()
    {
        tracing::warn!("connections still busy after the grace period; closing them");
    }
    retention.abort();
    producer_expiration.abort();
    cleaner.abort();
    groups.abort();
    cluster.controller.shutdown().await;
    if let Some(m) = metrics {
        m.abort();
    }
    broker
        .sync()
        .map_err(|e| anyhow::anyhow!("cannot sync storage at shutdown: {e}"))?;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// `cairn dump-log LOG_DIR [TOPIC]`: every batch of every partition kept in a (stopped)
/// broker's log dir, one line each: `topic partition base_offset last_offset leader_epoch
/// crc` and the producer (id, epoch, sequence; `txn` for transactional batches) or, for a
/// transaction marker, which end and whose; like kafka-dump-log.sh. Compacted topics (the
/// coordinators' ones always), which every replica cleans on its own, print instead the
/// latest record of each key that has one (`topic partition offset key=HEX value=CRC32C`),
/// what stays the same on every replica. The fault harness compares replicas with it.
fn dump_log(args: &[String]) -> ExitCode {
    const USAGE: &str = "usage: cairn dump-log LOG_DIR [TOPIC]";
    let Some(dir) = args.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if dir == "-h" || dir == "--help" {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    // Opening a log dir creates it: a mistyped path must not become an empty data dir.
    if !std::path::Path::new(dir).is_dir() {
        eprintln!("cairn dump-log: {dir} is not a directory\n{USAGE}");
        return ExitCode::from(2);
    }
    let only = args.get(1);
    let run = || -> anyhow::Result<()> {
        let config = Config::load(None, Vec::new(), &[format!("log.dirs={dir}")])?;
        let broker = Broker::open(config, cairn::dispatch::APIS)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut out = std::io::stdout().lock();
        for t in broker.catalog.all() {
            if only.is_some_and(|o| *o != t.name) {
                continue;
            }
            for p in &t.partitions {
                if t.is_compacted() {
                    latest_per_key(&runtime, &t.name, p, &mut out)?;
                    continue;
                }
                let mut at = p.log.offsets().log_start;
                loop {
                    let r = runtime.block_on(p.log.read(
                        at,
                        1 << 20,
                        true,
                        cairn::log::ReadUpTo::LogEnd,
                    ))?;
                    if r.records.is_empty() {
                        break;
                    }
                    let mut rest = &r.records[..];
                    for h in cairn::log::batch::headers(&r.records) {
                        use std::io::Write;
                        let (batch, next) = rest.split_at(h.size);
                        rest = next;
                        write!(
                            out,
                            "{} {} {} {} {} {:08x}",
                            t.name,
                            p.index,
                            h.base_offset,
                            h.last_offset(),
                            h.partition_leader_epoch,
                            h.crc
                        )?;
                        // Transaction markers: which end, for which producer and epoch.
                        match cairn::log::batch::control_type(batch, &h) {
                            Some(kind) => writeln!(
                                out,
                                " {} producer={} epoch={} coordinator_epoch={}",
                                match kind {
                                    cairn::log::batch::ControlType::Commit => "COMMIT",
                                    cairn::log::batch::ControlType::Abort => "ABORT",
                                },
                                h.producer_id,
                                h.producer_epoch,
                                cairn::log::batch::marker_coordinator_epoch(batch, &h)
                                    .unwrap_or(-1)
                            )?,
                            // Idempotent and transactional batches: who wrote them.
                            None if h.producer_id >= 0 => writeln!(
                                out,
                                " producer={} epoch={} seq={}{}",
                                h.producer_id,
                                h.producer_epoch,
                                h.base_sequence,
                                if h.is_transactional() { " txn" } else { "" }
                            )?,
                            None => writeln!(out)?,
                        }
                        at = h.last_offset() + 1;
                    }
                }
            }
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn dump-log: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// For `dump-log`: the latest record of each key of a compacted partition, in offset
/// order; keys whose latest record is a tombstone are left out (a replica may have removed
/// it, another not yet).
fn latest_per_key(
    runtime: &tokio::runtime::Runtime,
    topic: &str,
    p: &cairn::topics::Partition,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    use kafka_protocol::records::RecordBatchDecoder;
    let mut latest: std::collections::HashMap<bytes::Bytes, (i64, Option<bytes::Bytes>)> =
        std::collections::HashMap::new();
    let mut at = p.log.offsets().log_start;
    loop {
        let r = runtime.block_on(p.log.read(at, 1 << 20, true, cairn::log::ReadUpTo::LogEnd))?;
        if r.records.is_empty() {
            break;
        }
        for h in cairn::log::batch::headers(&r.records) {
            at = at.max(h.last_offset() + 1);
        }
        let mut bytes = r.records;
        while !bytes.is_empty() {
            let set = RecordBatchDecoder::decode(&mut bytes)
                .map_err(|e| anyhow::anyhow!("{topic}-{}: {e}", p.index))?;
            for rec in set.records.into_iter().filter(|r| !r.control) {
                if let Some(k) = rec.key {
                    latest.insert(k, (rec.offset, rec.value));
                }
            }
        }
    }
    let mut live: Vec<_> = latest
        .into_iter()
        .filter_map(|(k, (offset, v))| Some((offset, k, v?)))
        .collect();
    live.sort();
    for (offset, k, v) in live {
        let key: String = k.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(
            out,
            "{topic} {} {offset} key={key} value={:08x}",
            p.index,
            crc32c::crc32c(&v)
        )?;
    }
    Ok(())
}

/// `cairn healthcheck [host:port]`: exits 0 when the broker's `/ready` answers 200 (default
/// 127.0.0.1:9644), for container health checks in images without a shell or curl.
fn healthcheck(addr: Option<&str>) -> ExitCode {
    use std::io::{Read, Write};
    let addr = addr.unwrap_or("127.0.0.1:9644");
    let answer = (|| -> std::io::Result<String> {
        let sock: std::net::SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(addr)?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let mut s = std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(3))?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        write!(s, "GET /ready HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })();
    match answer {
        Ok(a) if a.starts_with("HTTP/1.1 200") || a.starts_with("HTTP/1.0 200") => {
            ExitCode::SUCCESS
        }
        Ok(a) => {
            eprintln!(
                "cairn healthcheck: {}",
                a.lines().next().unwrap_or("empty answer")
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("cairn healthcheck: {addr}: {e}");
            ExitCode::FAILURE
        }
    }
}
