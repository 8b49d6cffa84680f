#!/usr/bin/env bash
# Usage: bench/backlog.sh CAIRN_BINARY [MORE_CAIRN_BINARIES...]
# Issue 19's pinned view of reading a backlog: each broker on core 0 (taskset), kcat
# (librdkafka, a light C client) on core 1. Per broker, N x 1 KiB records are written
# once into PARTS partitions with kcat; every run then starts the broker on a copy of that
# data with the page cache dropped (where the machine allows it), reads everything from
# offset 0 with kcat ("cold"), then reads it all again ("hot": page cache and the broker's
# caches warm).
# Reported per read: MB/s, the broker's CPU-seconds per GiB (/proc/PID/stat), the whole
# machine's busy CPU-seconds per GiB (/proc/stat: Kafka's page cache work happens in
# kernel threads), peak resident memory, the broker's context switches and page faults per
# GiB (perf stat; bench/counters-lib.sh). Medians of RUNS runs; Cairn/Kafka ratios.
# BENCH_PROFILE=1 profiles every read too (TAG.top.txt, TAG.svg in WORK; see counters-lib.sh).
# Apache Kafka (KAFKA_REF_VERSION, from compat-tests/kafka-ref) runs first, each Cairn
# binary after it, in the same run. Results: bench/results/backlog.md.
# Environment: RUNS (default 3), N (default 1000000), PARTS (default 8),
#   BENCH_ONLY=kafka|cairn, WORK (default /tmp/cairn-bench-backlog).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
RUNS="${RUNS:-3}"
N="${N:-1000000}"
PARTS="${PARTS:-8}"
WORK="${WORK:-/tmp/cairn-bench-backlog}"
ONLY="${BENCH_ONLY:-}"
OUT="$HERE/results/backlog.md"
TOPIC=backlog

log() { echo "[backlog $(date +%H:%M:%S)] $*" >&2; }
die() { echo "backlog.sh: $*" >&2; exit 1; }

source "$HERE/pinned-lib.sh"
pinned_init "$@"
source "$HERE/counters-lib.sh"

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }

# start_broker KIND BIN DIR: starts it on core 0; sets BROKER_PID (and KAFKA_DIR).
start_broker() {
  local kind="$1" bin="$2" dir="$3"
  if [[ "$kind" == kafka ]]; then
    KAFKA_DIR="$dir"
    KAFKA_REF_EXTRA_PROPS="num.partitions=$PARTS" taskset -c 0 \
      "$ROOT/compat-tests/kafka-ref/start.sh" "$PORT" "$dir" >/dev/null
    BROKER_PID="$(cat "$dir/kafka.pid")"
  else
    taskset -c 0 "$bin" --override "listeners=PLAINTEXT://$BOOT" --override "log.dirs=$dir/data" \
      --override metrics.listener=none --override "num.partitions=$PARTS" > "$dir/cairn.log" 2>&1 &
    BROKER_PID=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
  fi
}

# read_all NAME RUN PHASE: one kcat read of the whole topic; a line to $RAW.
read_all() {
  local name="$1" run="$2" phase="$3"
  local j0 b0 t0 n t1 j1 b1
  local counts="$WORK/$name-$run-$phase.perfstat"
  counters_begin "$BROKER_PID" "$counts"
  j0=$(proc_jiffies "$BROKER_PID"); b0=$(busy_jiffies); t0=$(date +%s%N)
  n=$(taskset -c 1 kcat -C -b "$BOOT" -t "$TOPIC" -o beginning -e -q -f '%S\n' | wc -l)
  t1=$(date +%s%N); j1=$(proc_jiffies "$BROKER_PID"); b1=$(busy_jiffies)
  counters_end
  [[ "$n" == "$N" ]] || die "$name run $run $phase: read $n records, wrote $N"
  local hwm; hwm=$(awk '/VmHWM/{print $2}' "/proc/$BROKER_PID/status")
  local cs pf
  cs=$(counter "$counts" context-switches); pf=$(counter "$counts" page-faults)
  python3 - "$name" "$run" "$phase" "$N" "$t0" "$t1" "$j0" "$j1" "$b0" "$b1" "$hwm" "${cs:--1}" "${pf:--1}" >> "$RAW" <<'PY'
import os, sys
name, run, phase, n, t0, t1, j0, j1, b0, b1, hwm, cs, pf = sys.argv[1:]
hz = os.sysconf("SC_CLK_TCK")
gib = int(n) * 1024 / 2**30
secs = (int(t1) - int(t0)) / 1e9
per_gib = lambda c: "nan" if int(c) < 0 else f"{int(c) / gib / 1000:.1f}"
print(f"{name}\t{run}\t{phase}\t{gib * 1024 / secs:.1f}\t{(int(j1) - int(j0)) / hz / gib:.3f}\t"
      f"{(int(b1) - int(b0)) / hz / gib:.3f}\t{int(hwm) // 1024}\t{per_gib(cs)}\t{per_gib(pf)}")
PY
  log "$name run $run $phase: $(tail -1 "$RAW" | cut -f4-)"
}

# bench KIND NAME BIN
bench() {
  local kind="$1" name="$2" bin="$3"
  local seed="$WORK/seed-$name"
  rm -rf "$seed" && mkdir -p "$seed"
  log "$name: writing the backlog ($N records, $PARTS partitions)"
  start_broker "$kind" "$bin" "$seed"
  kcat -P -b "$BOOT" -t "$TOPIC" -X linger.ms=50 -X batch.size=1000000 -z none < "$LINES"
  stop_broker
  for run in $(seq "$RUNS"); do
    local dir="$WORK/run-$name"
    rm -rf "$dir" && cp -r "$seed" "$dir"
    rm -f "$dir/kafka.pid"
    local cache; cache=$(drop_caches)
    echo "$cache" > "$WORK/page-cache"
    log "$name run $run: page cache $cache"
    start_broker "$kind" "$bin" "$dir"
    read_all "$name" "$run" cold
    read_all "$name" "$run" hot
    stop_broker
  done
  rm -rf "$seed" "$WORK/run-$name"
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

python3 - "$RAW" "$OUT" "$N" "$PARTS" "$RUNS" "$(cat "$WORK/page-cache" 2>/dev/null || echo unknown)" <<'PY'
import statistics, sys, datetime
raw, out, n, parts, runs, cache = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(raw) if l.strip()]
names = list(dict.fromkeys(r[0] for r in rows))
def med(name, phase, col):
    return statistics.median(float(r[col]) for r in rows if r[0] == name and r[2] == phase)
kafka = next((x for x in names if x.startswith("kafka")), None)
lines = [f"# Reading a backlog, pinned: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC",
         "",
         f"bench/backlog.sh: {n} x 1 KiB records in {parts} partitions; broker on core 0, kcat on "
         f"core 1; medians of {runs} runs. cold: first read after a restart (page cache {cache} "
         "before it); hot: the second read.",
         "",
         "| broker | read | MB/s | broker CPU-s/GiB | machine CPU-s/GiB | peak RSS MiB "
         "| broker context switches, k/GiB | broker page faults, k/GiB |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
for name in names:
    for phase in ("cold", "hot"):
        lines.append(f"| {name} | {phase} | {med(name, phase, 3):.0f} | {med(name, phase, 4):.2f} | "
                     f"{med(name, phase, 5):.2f} | {med(name, phase, 6):.0f} | "
                     f"{med(name, phase, 7):.1f} | {med(name, phase, 8):.1f} |")
if kafka:
    lines += ["", "Ratios, Cairn/Kafka (MB/s higher is better, CPU lower is better):", "",
              "| broker | read | MB/s | broker CPU/GiB | machine CPU/GiB |", "|---|---|---:|---:|---:|"]
    for name in names:
        if name == kafka:
            continue
        for phase in ("cold", "hot"):
            r = [med(name, phase, c) / med(kafka, phase, c) for c in (3, 4, 5)]
            lines.append(f"| {name} | {phase} | {r[0]:.2f}x | {r[1]:.2f}x | {r[2]:.2f}x |")
lines += ["", "Raw runs (name, run, read, MB/s, broker CPU-s/GiB, machine CPU-s/GiB, peak RSS MiB, "
          "context switches and page faults in thousands per GiB; nan: perf was not there):", "",
          "```"] + ["\t".join(r) for r in rows] + ["```", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
