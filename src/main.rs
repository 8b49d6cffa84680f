//! The `cairn` binary: `cairn [server.properties] [--override key=value]...`, like
//! `kafka-server-start.sh`. Config, then telemetry, storage, listeners; runs until SIGTERM or
//! SIGINT, then stops accepting, lets connections finish the request in hand, syncs storage
//! and exits 0.

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

fn main() -> ExitCode {
    let started = Instant::now();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("CAIRN_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
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
    match runtime.block_on(run(config, started)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config, started: Instant) -> anyhow::Result<()> {
    let log_dirs = config.log_dirs.clone();
    let broker = tokio::task::spawn_blocking(move || Broker::open(config))
        .await?
        .map_err(|e| {
            let dirs: Vec<String> = log_dirs.iter().map(|d| d.display().to_string()).collect();
            anyhow::anyhow!("cannot open storage in {}: {e}", dirs.join(","))
        })?;
    let listeners = cairn::server::bind(&broker).await?;
    tracing::info!(
        node_id = broker.node_id(),
        cluster_id = %broker.cluster_id,
        log_dirs = ?broker.config.log_dirs,
        startup_ms = started.elapsed().as_millis() as u64,
        "cairn started"
    );
    let serving = tokio::spawn(cairn::server::serve(broker.clone(), listeners));
    let retention = tokio::spawn(broker.clone().run_retention());
    let groups = tokio::spawn(broker.groups.clone().run(broker.shutdown_signal()));

    wait_for_signal().await?;
    tracing::info!("shutting down: no new connections, finishing requests in flight");
    broker.begin_shutdown();
    if tokio::time::timeout(Duration::from_millis(SHUTDOWN_GRACE_MS), serving)
        .await
        .is_err()
    {
        tracing::warn!("connections still busy after the grace period; closing them");
    }
    retention.abort();
    groups.abort();
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
