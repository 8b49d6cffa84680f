#!/usr/bin/env python3
"""Log cleaner benchmark: Cairn against Apache Kafka (compat-tests/kafka-ref, the Maven
jars), one after the other on the same port, each on a fresh data directory, with the same
topic and cleaner settings.

    bench/compaction.py CAIRN_BINARY [--records N] [--keys K] [--runs R]

Per broker and run:
1. a new one-partition topic with cleanup.policy=delete and segment.bytes=1 MiB (Kafka's
   smallest), so nothing is cleaned while it fills;
2. kcat (librdkafka) writes N keyed records (keys 0..K-1 in turn, 100-byte values, no
   compression), timed: the backlog;
3. kafka-configs switches the topic to cleanup.policy=compact (min.cleanable.dirty.ratio
   0.01) and the clock starts; the pass is over when record N-2K-1 is gone, which a
   one-record kcat read from that offset sees, polled every 50 ms. (The active segment,
   never cleaned, holds fewer than the last K records, 1 MiB of them; so record N-K-1, of
   the same key, is cleanable and supersedes it, and it is among the last a pass removes.)
4. while that pass runs on a second topic, N records more are written to a third topic, to
   compare produce throughput beside a running cleaner with the plain write of step 2.

Both brokers clean with one thread, a 128 MiB dedupe buffer and log.cleaner.backoff.ms=100.
Reported: medians over runs of the backlog's payload MB (keys and values) cleaned per
second, from the switch to compact to the pass's end (the cleaner's pick-up included), and
records/s written with and without a cleaning pass running, with the Cairn/Kafka ratios,
into bench/results/compaction.md.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KRUN = ROOT / "compat-tests" / "java" / "kafka-run.sh"
KREF = ROOT / "compat-tests" / "kafka-ref"
CLEANER_PROPS = ["log.cleaner.backoff.ms=100", "log.cleaner.threads=1",
                 "log.cleaner.dedupe.buffer.size=134217728"]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout


def kafka_tool(cls, *args):
    env = dict(os.environ, KAFKA_VERSION=os.environ.get("KAFKA_REF_VERSION", "4.4.0"))
    return sh([str(KRUN), cls, *args], env=env, timeout=120)


class Broker:
    def __init__(self, kind, port, work, cairn=None):
        self.kind, self.port, self.dir, self.cairn = kind, port, work / kind, cairn
        self.boot = f"127.0.0.1:{port}"
        self.proc = None

    def start(self):
        self.dir.mkdir(parents=True)
        if self.kind == "kafka":
            env = dict(os.environ, KAFKA_REF_EXTRA_PROPS="\n".join(CLEANER_PROPS))
            sh([str(KREF / "start.sh"), str(self.port), str(self.dir)], env=env, timeout=300)
            return
        args = [self.cairn]
        for o in [f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                  f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                  f"log.dirs={self.dir / 'data'}", "metrics.listener=none", "node.id=1",
                  "num.partitions=1"] + CLEANER_PROPS:
            args += ["--override", o]
        out = open(self.dir / "cairn.log", "wb")
        self.proc = subprocess.Popen(args, stdout=out, stderr=out, env=dict(os.environ, CAIRN_LOG="warn"))
        deadline = time.time() + 60
        while subprocess.run(["kcat", "-L", "-b", self.boot, "-m", "1"], capture_output=True).returncode:
            if time.time() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"cairn did not start: {(self.dir / 'cairn.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self):
        if self.kind == "kafka":
            subprocess.run([str(KREF / "stop.sh"), str(self.dir)], capture_output=True)
        elif self.proc:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)

    def create(self, topic):
        kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.boot, "--create",
                   "--topic", topic, "--partitions", "1", "--replication-factor", "1",
                   "--config", "cleanup.policy=delete", "--config", "segment.bytes=1048576")

    def compact(self, topic):
        kafka_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", self.boot, "--alter",
                   "--entity-type", "topics", "--entity-name", topic, "--add-config",
                   "cleanup.policy=compact,min.cleanable.dirty.ratio=0.01")

    def produce(self, topic, data):
        """Writes the keyed records in `data` (a file of key:value lines); seconds taken."""
        t0 = time.time()
        with open(data, "rb") as f:
            subprocess.run(["kcat", "-P", "-b", self.boot, "-t", topic, "-p", "0", "-K", ":",
                            "-X", "acks=1", "-X", "linger.ms=5", "-X", "batch.size=65536",
                            "-X", "compression.codec=none", "-X", "queue.buffering.max.messages=1000000"],
                           stdin=f, check=True, timeout=900)
        return time.time() - t0

    def first_offset_from(self, topic, offset):
        out = subprocess.run(["kcat", "-C", "-b", self.boot, "-t", topic, "-p", "0", "-o", str(offset),
                              "-c", "1", "-e", "-q", "-f", "%o\\n"], capture_output=True, text=True,
                             timeout=60).stdout.split()
        return int(out[0]) if out else None


def run_broker(b, data, payload_mb, n, keys, runs, raw):
    b.start()
    try:
        for r in range(runs):
            backlog, other = f"clean-{r}", f"beside-{r}"
            b.create(backlog)
            b.create(other)
            plain = b.produce(backlog, data)
            probe = n - 2 * keys - 1
            if b.first_offset_from(backlog, probe) != probe:
                raise SystemExit(f"{b.kind}: offset {probe} of {backlog} missing before cleaning")
            b.compact(backlog)
            t0 = time.time()
            beside = b.produce(other, data)
            cleaned = None
            deadline = t0 + 900
            while cleaned is None:
                if (b.first_offset_from(backlog, probe) or -1) > probe:
                    cleaned = time.time() - t0
                elif time.time() > deadline:
                    raise SystemExit(f"{b.kind}: {backlog} not cleaned in 900 s")
                else:
                    time.sleep(0.05)
            row = {"clean_mb_s": payload_mb / cleaned, "clean_s": cleaned,
                   "produce_rps": n / plain, "produce_beside_cleaner_rps": n / beside}
            for k, v in row.items():
                raw.write(f"{b.kind}\t{k}\t{r}\t{v:.3f}\n")
            log(f"{b.kind} run {r}: cleaned {payload_mb:.0f} MB in {cleaned:.2f} s "
                f"({row['clean_mb_s']:.1f} MB/s); produce {row['produce_rps']:.0f} rec/s alone, "
                f"{row['produce_beside_cleaner_rps']:.0f} rec/s beside the cleaner"
                f"{' (the pass ended first)' if cleaned < beside else ''}")
            yield row
    finally:
        b.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cairn")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--port", type=int, default=47192)
    a = ap.parse_args()
    if a.records < 3 * a.keys or a.keys * 110 < 1 << 20:
        raise SystemExit("need --records >= 3 * --keys, and --keys >= 9533 (over 1 MiB of records)")
    for tool in ("kcat", "java"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found")
    subprocess.run([str(ROOT / "compat-tests" / "java" / "setup.sh")], check=True,
                   env=dict(os.environ, KAFKA_VERSION=os.environ.get("KAFKA_REF_VERSION", "4.4.0")))
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-compaction."))
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    data = work / "records.txt"
    value = "v" * 100
    with open(data, "w") as f:
        for i in range(a.records):
            f.write(f"key-{i % a.keys:06d}:{i:010d}{value[10:]}\n")
    payload_mb = (a.records * (10 + 100)) / 1e6
    log(f"{a.records} records over {a.keys} keys, {payload_mb:.0f} MB of keys and values; work dir {work}")
    medians = {}
    try:
        with open(results / "compaction-raw.tsv", "w") as raw:
            raw.write("broker\tmetric\trun\tvalue\n")
            for kind in ("kafka", "cairn"):
                b = Broker(kind, a.port, work, cairn=os.path.abspath(a.cairn))
                rows = list(run_broker(b, data, payload_mb, a.records, a.keys, a.runs, raw))
                medians[kind] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [f"# Log cleaner: Cairn vs Apache Kafka ({time.strftime('%Y-%m-%d')})", "",
             f"{a.records} records over {a.keys} keys ({payload_mb:.0f} MB of keys and values), one "
             f"partition, segment.bytes=1 MiB, medians of {a.runs} runs (`bench/compaction.py`).", "",
             "| metric | Kafka | Cairn | Cairn/Kafka |", "|---|---|---|---|"]
    names = {"clean_mb_s": "cleaner MB/s (higher is better)", "clean_s": "seconds to clean the backlog",
             "produce_rps": "produce records/s, cleaner idle",
             "produce_beside_cleaner_rps": "produce records/s, cleaner running"}
    for k, name in names.items():
        kv, cv = medians["kafka"][k], medians["cairn"][k]
        lines.append(f"| {name} | {kv:,.1f} | {cv:,.1f} | {cv / kv:.2f} |")
    text = "\n".join(lines) + "\n"
    (results / "compaction.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
