//! Start-up, configuration errors, graceful shutdown, restart and crash recovery of the
//! real binary.

mod common;

use std::process::Command;

use common::{batch, batch_with, Broker};
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};

/// Waits until the broker started by hand listens on `port` (and is still running).
fn wait_for_listener(child: &mut std::process::Child, port: u16) -> std::net::SocketAddr {
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !common::listening(addr) {
        assert!(child.try_wait().unwrap().is_none(), "cairn exited");
        assert!(std::time::Instant::now() < deadline, "cairn did not listen");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    addr
}

#[test]
fn bad_config_values_stop_start_up_with_the_key_named() {
    for (args, expect) in [
        (vec!["--override", "num.partitions=many"], "num.partitions"),
        (
            vec!["--override", "listeners=PLAINTEXT://127.0.0.1:70000"],
            "listeners",
        ),
        (
            vec!["--override", "auto.create.topics.enable=maybe"],
            "auto.create.topics.enable",
        ),
        (
            vec!["/definitely/not/here.properties"],
            "cannot read config file",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

#[test]
fn environment_and_properties_file_configure_the_broker() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let props = dir.path().join("server.properties");
    std::fs::write(
        &props,
        format!("listeners=PLAINTEXT://127.0.0.1:{port}\nnum.partitions=1\nsome.unknown.key=1\n"),
    )
    .unwrap();
    let data = dir.path().join("envdata");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg(&props)
        .arg("--override")
        .arg("metrics.listener=none")
        .env("KAFKA_LOG_DIRS", &data)
        .env("KAFKA_NUM_PARTITIONS", "4")
        .spawn()
        .unwrap();
    let addr = wait_for_listener(&mut child, port);
    let mut c = common::Client::connect(addr);
    let m: kafka_protocol::messages::MetadataResponse = c.send(
        ApiKey::Metadata,
        12,
        &kafka_protocol::messages::MetadataRequest::default()
            .with_topics(Some(vec![
                kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(common::name("e"))),
            ]))
            .with_allow_auto_topic_creation(true),
    );
    assert_eq!(
        m.topics[0].partitions.len(),
        4,
        "KAFKA_NUM_PARTITIONS beats the file"
    );
    assert!(
        common::data_dir_exists(&data),
        "KAFKA_LOG_DIRS is where data goes"
    );
    common::signal(&child, "TERM");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn sigterm_exits_zero_and_data_survives_restart() {
    let mut b = Broker::start();
    let mut c = b.client();
    c.create_topic("keep", 2, &[]);
    c.produce("keep", 1, batch(&["a", "b", "c"]), -1);
    let id_before = {
        let m: kafka_protocol::messages::MetadataResponse = c.send(
            ApiKey::Metadata,
            12,
            &kafka_protocol::messages::MetadataRequest::default().with_topics(None),
        );
        m.topics[0].topic_id
    };
    assert_eq!(b.stop(), Some(0));
    b.restart();
    let mut c = b.client();
    let m: kafka_protocol::messages::MetadataResponse = c.send(
        ApiKey::Metadata,
        12,
        &kafka_protocol::messages::MetadataRequest::default().with_topics(None),
    );
    assert_eq!(m.topics[0].topic_id, id_before, "topic ids are stable");
    let (_, hw, recs) = c.fetch("keep", 1, 0);
    assert_eq!((hw, recs.len()), (3, 3));
    assert_eq!(
        c.produce("keep", 1, batch(&["d"]), 1),
        (0, 3),
        "offsets continue"
    );
}

#[test]
fn kill_9_loses_nothing_acknowledged() {
    let mut b = Broker::start();
    let mut c = b.client();
    c.create_topic("crash", 1, &[]);
    let r: InitProducerIdResponse = c.send(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None),
    );
    let pid = r.producer_id.0;
    let mut acked = 0;
    for i in 0..50 {
        let acks = if i % 2 == 0 { 1 } else { -1 };
        let (err, base) = c.produce(
            "crash",
            0,
            batch_with(&[&format!("m{i}")], pid, 0, i, 1),
            acks,
        );
        assert_eq!((err, base), (0, i as i64));
        acked += 1;
    }
    b.kill9();
    b.restart();
    let mut c = b.client();
    let (_, hw, recs) = c.fetch("crash", 0, 0);
    assert_eq!(hw, acked);
    for (i, (offset, value)) in recs.iter().enumerate() {
        assert_eq!(
            (*offset, value.as_str()),
            (i as i64, format!("m{i}").as_str())
        );
    }
    // The producer's state came back with the log: a retry of the last batch is a duplicate,
    // and producer ids are never handed out twice.
    let last = batch_with(&["m49"], pid, 0, 49, 1);
    assert_eq!(c.produce("crash", 0, last, -1), (0, 49));
    let r: InitProducerIdResponse = c.send(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None),
    );
    assert!(r.producer_id.0 > pid);
}

#[test]
fn retention_by_size_runs_in_the_background() {
    let b = Broker::start_with(&["log.retention.check.interval.ms=100"]);
    let mut c = b.client();
    c.create_topic("ret", 1, &[("retention.bytes", "1")]);
    for i in 0..5 {
        c.produce("ret", 0, batch(&[&format!("v{i}")]), 1);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let start = c.list_offset("ret", 0, -2).1;
        if start == 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "retention never moved the log start to the last batch (at {start})"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Like Kafka, which never deletes the active segment, the newest batch stays.
    assert_eq!(c.list_offset("ret", 0, -1).1, 5);
    assert_eq!(c.produce("ret", 0, batch(&["after"]), 1), (0, 5));
}

#[test]
fn partitions_spread_over_several_log_dirs_and_come_back_after_kill_9() {
    use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};
    let extra = tempfile::tempdir().unwrap();
    let (a, b) = (extra.path().join("a"), extra.path().join("b"));
    let dirs = format!("log.dirs={},{}", a.display(), b.display());
    let mut broker = Broker::start_with(&[&dirs]);
    let mut c = broker.client();
    assert_eq!(c.create_topic("spread", 4, &[]), 0);
    for p in 0..4 {
        let (err, _) = c.produce("spread", p, batch(&[&format!("v{p}")]), -1);
        assert_eq!(err, 0);
    }
    let describe = |c: &mut common::Client| -> Vec<(String, Vec<i32>)> {
        let r: DescribeLogDirsResponse = c.send(
            ApiKey::DescribeLogDirs,
            4,
            &DescribeLogDirsRequest::default().with_topics(None),
        );
        r.results
            .iter()
            .map(|d| {
                let mut ps: Vec<i32> = d
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
                    .collect();
                ps.sort();
                (d.log_dir.to_string(), ps)
            })
            .collect()
    };
    let before = describe(&mut c);
    assert_eq!(before.len(), 2, "one result per log dir: {before:?}");
    assert!(before[0].0.ends_with("/a") && before[1].0.ends_with("/b"));
    assert_eq!(before[0].1.len() + before[1].1.len(), 4);
    assert_eq!(
        (before[0].1.len(), before[1].1.len()),
        (2, 2),
        "balanced: {before:?}"
    );
    assert!(
        a.join("CURRENT").exists() && b.join("CURRENT").exists(),
        "a RocksDB in each"
    );

    broker.kill9();
    broker.restart();
    let mut c = broker.client();
    assert_eq!(describe(&mut c), before, "partitions stay in their dirs");
    for p in 0..4 {
        let (err, _, recs) = c.fetch("spread", p, 0);
        assert_eq!(err, 0);
        assert_eq!(recs, vec![(0, format!("v{p}"))]);
    }
}

#[test]
fn a_log_dir_listed_twice_is_a_config_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["--override", "log.dirs=/tmp/x,/tmp/y,/tmp/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("log.dirs") && err.contains("listed twice"),
        "{err}"
    );
}

/// `cairn dump-log` on a path that is not a log dir says so and creates nothing (opening a
/// log dir creates it, so `dump-log --help` once made a data dir named `--help`).
#[test]
fn dump_log_refuses_a_missing_dir_and_answers_help() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-dir");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["dump-log", missing.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a directory"), "{err}");
    assert!(!missing.exists(), "dump-log created {}", missing.display());
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["dump-log", "--help"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("usage: cairn dump-log"));
    assert!(!tmp.path().join("--help").exists());
}

/// Kafka 4's stock KRaft server.properties (combined mode, one node) runs Cairn unchanged:
/// clients get the PLAINTEXT listener, never the CONTROLLER one.
#[test]
fn kafkas_stock_kraft_server_properties_run_a_single_node() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let controller = common::free_port();
    let props = dir.path().join("server.properties");
    std::fs::write(
        &props,
        format!(
            "process.roles=broker,controller\n\
             node.id=1\n\
             controller.quorum.bootstrap.servers=127.0.0.1:{controller}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             inter.broker.listener.name=PLAINTEXT\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             controller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n\
             log.dirs={}\n\
             num.partitions=1\n\
             offsets.topic.replication.factor=1\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             log.retention.hours=168\n\
             log.segment.bytes=1073741824\n\
             log.retention.check.interval.ms=300000\n",
            dir.path().join("kraft-combined-logs").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg(&props)
        .args(["--override", "metrics.listener=none"])
        .spawn()
        .unwrap();
    let addr = wait_for_listener(&mut child, port);
    let mut c = common::Client::connect(addr);
    let m: kafka_protocol::messages::MetadataResponse = c.send(
        ApiKey::Metadata,
        12,
        &kafka_protocol::messages::MetadataRequest::default(),
    );
    assert_eq!(m.brokers.len(), 1);
    assert_eq!(m.brokers[0].port, port as i32);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", controller)).is_err(),
        "the controller listener is not served to Kafka clients"
    );
    assert_eq!(
        c.produce("stock", 0, batch(&["a"]), -1).0,
        3,
        "no such topic yet"
    );
    assert_eq!(c.create_topic("stock", 1, &[]), 0);
    assert_eq!(c.produce("stock", 0, batch(&["a"]), -1).0, 0);
    common::signal(&child, "TERM");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
