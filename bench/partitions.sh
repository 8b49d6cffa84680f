#!/usr/bin/env bash
# Usage: bench/partitions.sh CAIRN_BINARY [MORE_CAIRN_BINARIES...]
# Issue 19's partition-count view, pinned as bench/backlog.sh is: each broker on core 0
# (taskset), kcat (librdkafka) on core 1. Per broker, for each partition count P in COUNTS,
# a new topic of P partitions (TopicCommand, in steps of 5,000), N x 1 KiB records produced into it with
# kcat (each record to a random partition: P partitions, N/P records each), then all read
# back from offset 0 with kcat. Reported per count: produce and consume MB/s and broker
# CPU-seconds per GiB, the broker's resident memory (VmRSS, and RssAnon: the part no file
# backs) after the read.
# Then start-up: the broker is stopped with every topic on disk, the page cache dropped
# (where the machine allows it), and the broker started again; reported is the time from
# launch to the first acknowledged one-record produce into the largest topic (kcat, retried
# every 10 ms), as bench/run.sh measures it.
# Apache Kafka (KAFKA_REF_VERSION, from compat-tests/kafka-ref) runs first, each Cairn
# binary after it, in the same run. Results: bench/results/partitions.md.
# Environment: COUNTS (default "1 100 1000 10000"), N (default 200000),
#   BENCH_ONLY=kafka|cairn, WORK (default /tmp/cairn-bench-partitions).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
COUNTS="${COUNTS:-1 100 1000 10000}"
N="${N:-200000}"
WORK="${WORK:-/tmp/cairn-bench-partitions}"
ONLY="${BENCH_ONLY:-}"
OUT="$HERE/results/partitions.md"
KRUN="$ROOT/compat-tests/java/kafka-run.sh"

log() { echo "[partitions $(date +%H:%M:%S)] $*" >&2; }
die() { echo "partitions.sh: $*" >&2; exit 1; }

source "$HERE/pinned-lib.sh"
pinned_init "$@"
MAX=0
for p in $COUNTS; do (( p > MAX )) && MAX=$p; done

now_ms() { date +%s%3N; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
status_mib() { awk -v k="$2:" '$1 == k {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

# launch KIND BIN DIR: starts the broker on core 0 without waiting; sets BROKER_PID for
# Cairn, STARTER (kafka-ref/start.sh, which waits for Kafka) for Kafka.
launch() {
  local kind="$1" bin="$2" dir="$3"
  if [[ "$kind" == kafka ]]; then
    KAFKA_DIR="$dir"
    taskset -c 0 "$ROOT/compat-tests/kafka-ref/start.sh" "$PORT" "$dir" > "$dir/start.out" 2>&1 &
    STARTER=$!
  else
    taskset -c 0 "$bin" --override "listeners=PLAINTEXT://$BOOT" --override "log.dirs=$dir/data" \
      --override metrics.listener=none >> "$dir/cairn.log" 2>&1 &
    BROKER_PID=$!
  fi
}

# ready KIND DIR: waits for the broker to serve (Kafka: start.sh returned).
ready() {
  local kind="$1" dir="$2"
  if [[ "$kind" == kafka ]]; then
    wait "$STARTER" || die "Kafka did not start: $(tail -3 "$dir/start.out")"
    STARTER=""
    BROKER_PID="$(cat "$dir/kafka.pid")"
  else
    for _ in $(seq 600); do port_open "$PORT" && return 0; sleep 0.1; done
    die "Cairn did not start: $(tail -3 "$dir/cairn.log")"
  fi
}

# first_produce TOPIC: retries a one-record produce every 10 ms until it is acknowledged.
first_produce() {
  local topic="$1" deadline=$(( $(now_ms) + 600000 ))
  while (( $(now_ms) < deadline )); do
    if port_open "$PORT" && printf 'probe\n' | timeout 30 taskset -c 1 kcat -P -b "$BOOT" -t "$topic" -p 0 \
        -X message.timeout.ms=5000 -X reconnect.backoff.ms=10 -X reconnect.backoff.max.ms=50 \
        -X retry.backoff.ms=10 -X topic.metadata.refresh.fast.interval.ms=10 \
        -X request.required.acks=1 2>&1 | { ! grep -qi 'fail\|error'; }; then
      return 0
    fi
    sleep 0.01
  done
  die "no produce acknowledged within 600 s"
}

# one NAME P: a topic of P partitions, N records in, all of them read back; a line to $RAW.
one() {
  local name="$1" p="$2" topic="p$2" t0 t1 t2 j0 j1 j2 n
  # Kafka's controller takes at most 10,000 records per operation (a partition is one), so
  # a larger topic is created in steps of 5,000 partitions.
  local have=$(( p < 5000 ? p : 5000 ))
  taskset -c 1 "$KRUN" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --create \
    --topic "$topic" --partitions "$have" --replication-factor 1 > "$WORK/create.out" 2>&1 \
    || die "$name: creating $topic failed: $(tail -3 "$WORK/create.out")"
  while (( have < p )); do
    have=$(( p - have < 5000 ? p : have + 5000 ))
    taskset -c 1 "$KRUN" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --alter \
      --topic "$topic" --partitions "$have" > "$WORK/create.out" 2>&1 \
      || die "$name: growing $topic to $have partitions failed: $(tail -3 "$WORK/create.out")"
  done
  j0=$(proc_jiffies "$BROKER_PID"); t0=$(now_ms)
  taskset -c 1 kcat -P -b "$BOOT" -t "$topic" -X linger.ms=50 -X batch.size=1000000 -z none \
    -X partitioner=random < "$LINES" 2> "$WORK/produce.err" \
    || die "$name: producing into $topic failed: $(tail -3 "$WORK/produce.err")"
  t1=$(now_ms); j1=$(proc_jiffies "$BROKER_PID")
  n=$(taskset -c 1 kcat -C -b "$BOOT" -t "$topic" -o beginning -e -q -f '%S\n' | wc -l)
  t2=$(now_ms); j2=$(proc_jiffies "$BROKER_PID")
  [[ "$n" == "$N" ]] || die "$name $topic: read $n records, wrote $N"
  python3 - "$name" "$p" "$N" "$t0" "$t1" "$t2" "$j0" "$j1" "$j2" \
    "$(status_mib "$BROKER_PID" VmRSS)" "$(status_mib "$BROKER_PID" RssAnon)" >> "$RAW" <<'PY'
import os, sys
name, p, n, t0, t1, t2, j0, j1, j2, rss, anon = sys.argv[1:]
hz = os.sysconf("SC_CLK_TCK")
gib = int(n) * 1024 / 2**30
mbs = lambda a, b: gib * 1024 / ((int(b) - int(a)) / 1e3)
cpu = lambda a, b: (int(b) - int(a)) / hz / gib
print(f"{name}\t{p}\t{mbs(t0, t1):.1f}\t{cpu(j0, j1):.2f}\t{mbs(t1, t2):.1f}\t{cpu(j1, j2):.2f}\t{rss}\t{anon}")
PY
  log "$name, $p partitions: $(tail -1 "$RAW" | cut -f3-)"
}

# bench KIND NAME BIN
bench() {
  local kind="$1" name="$2" bin="$3" dir="$WORK/$2" launched started
  rm -rf "$dir" && mkdir -p "$dir"
  launch "$kind" "$bin" "$dir"
  ready "$kind" "$dir"
  for p in $COUNTS; do one "$name" "$p"; done
  stop_broker
  log "$name: page cache $(drop_caches); starting again with every topic on disk"
  launched=$(now_ms)
  launch "$kind" "$bin" "$dir"
  first_produce "p$MAX"
  started=$(( $(now_ms) - launched ))
  ready "$kind" "$dir"
  printf '%s\tstart\t%s\n' "$name" "$started" >> "$RAW"
  log "$name: first produce acknowledged $started ms after launch"
  stop_broker
  rm -rf "$dir"
}

if [[ "$ONLY" != cairn ]]; then
  source "$ROOT/compat-tests/kafka-ref/version.sh"
  bench kafka "kafka-$KAFKA_REF_VERSION" ""
fi
if [[ "$ONLY" != kafka ]]; then
  for b in "${BINS[@]}"; do
    bench cairn "cairn-$(basename "$b")" "$b"
  done
fi

python3 - "$RAW" "$OUT" "$N" "$COUNTS" <<'PY'
import sys, datetime
raw, out, n, counts = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(raw) if l.strip()]
names = list(dict.fromkeys(r[0] for r in rows))
total = sum(int(c) for c in counts.split())
lines = [f"# Partition counts, pinned: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "",
         f"bench/partitions.sh: per partition count, a new topic and {n} x 1 KiB records produced "
         "into it with kcat (a random partition per record), then read back from offset 0; "
         "broker on core 0, kcat on core 1; one run. RSS after the read; anonymous RSS is the "
         "part no file backs.", "",
         "| broker | partitions | produce MB/s | produce broker CPU-s/GiB | consume MB/s | "
         "consume broker CPU-s/GiB | RSS MiB | anonymous RSS MiB |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    if r[1] != "start":
        lines.append("| " + " | ".join(r) + " |")
lines += ["", f"Start-up with every topic on disk ({total} partitions), page cache dropped: launch to "
          "the first acknowledged produce into the largest topic.", "",
          "| broker | ms |", "|---|---:|"]
for r in rows:
    if r[1] == "start":
        lines.append(f"| {r[0]} | {r[2]} |")
lines.append("")
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
