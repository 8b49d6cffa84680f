#!/usr/bin/env bash
# Usage: bench/quota.sh CAIRN_BINARY
#        BENCH_ONLY=kafka|cairn bench/quota.sh [CAIRN_BINARY]
#
# Client byte-rate quotas under load, on Apache Kafka (compat-tests/kafka-ref, 4.4.0) and
# Cairn, one after the other on a fresh data directory each, with the Java perf tools:
#   1. `free` (client id without a quota) produces at a fixed FREE_MBS MB/s alone for
#      SECS_BASE s: its baseline MB/s and latency;
#   2. `producer_byte_rate` QUOTA_MBS MB/s is set for client id `throttled` with
#      kafka-configs, then `throttled` produces at up to OFFERED_MBS MB/s for SECS s while
#      `free` produces as in 1.
# Reports, per broker: `throttled`'s MB/s in steady state (the mean of its 5 s windows
# after the first 20 s, once its 10 s burst allowance is spent) against its quota, and
# `free`'s MB/s and average latency with the throttled neighbour against its baseline.
# 1 KiB records, acks=1, 8 partitions; RUNS runs per broker (default 3), medians reported.
# Speed is measured, not asserted: nothing here fails on a number. Results:
# bench/results/quota.md.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
KRUN="$ROOT/compat-tests/java/kafka-run.sh"
KREF="$ROOT/compat-tests/kafka-ref"
ONLY=${BENCH_ONLY:-both}
CAIRN=${1:-}
[ "$ONLY" = kafka ] || [ -x "$CAIRN" ] || { sed -n '2,3p' "$0" >&2; exit 2; }
QUOTA_MBS=${QUOTA_MBS:-5}
OFFERED_MBS=${OFFERED_MBS:-50}
FREE_MBS=${FREE_MBS:-20}
SECS=${SECS:-60}
SECS_BASE=${SECS_BASE:-20}
RUNS=${RUNS:-3}
export KAFKA_VERSION=4.4.0
"$ROOT/compat-tests/java/setup.sh" >/dev/null

work=$(mktemp -d /tmp/cairn-quota-bench.XXXXXX)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  [ -f "$work/kafka/kafka.pid" ] && "$KREF/stop.sh" "$work/kafka" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR + 1) / 2)]; else print "n/a"}'; }
records() { awk -v mbs="$1" -v s="$2" 'BEGIN {printf "%d", mbs * 1024 * s}'; }

# produce CLIENT_ID MB/S SECONDS LOG TOPIC: ProducerPerformance at MB/S for about SECONDS
# (a throttled one is stopped then).
produce() {
  timeout -s INT "$(( $3 + 10 ))" "$KRUN" org.apache.kafka.tools.ProducerPerformance --topic "$5" --record-size 1024 \
    --num-records "$(records "$2" "$3")" --throughput "$(records "$2" 1)" \
    --reporting-interval 5000 \
    --producer-props "bootstrap.servers=127.0.0.1:$port" "client.id=$1" acks=1 \
    linger.ms=5 batch.size=65536 >"$4" 2>&1 || true
}
# The final line's MB/s and average latency.
summary() { grep -E '^[0-9]+ records sent' "$1" | tail -1 | sed -E 's/.*\(([0-9.]+) MB\/sec\), ([0-9.]+) ms avg latency.*/\1 \2/'; }
# The mean MB/s of the 5 s windows after the first 20 s (a throttled producer's windows
# alternate between bursts and throttles, so their median says little).
steady() { grep -E 'records/sec \(' "$1" | grep -vE 'ms 50th' | tail -n +5 | sed -E 's/.*\(([0-9.]+) MB\/sec\).*/\1/' | awk '{s += $1; n++} END {if (n) printf "%.2f", s / n; else print "n/a"}'; }

# measure NAME RUN: one run on the broker at $port; prints "steady alone_mbs alone_ms
# beside_mbs beside_ms". Each run uses its own topic and client ids.
measure() {
  local name=$1 run=$2 topic="quota-$2"
  local log="$work/$name-$run"
  "$KRUN" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
    --create --topic "$topic" --partitions 8 >/dev/null
  produce "free-$run" "$FREE_MBS" "$SECS_BASE" "$log-free-alone.log" "$topic"
  "$KRUN" org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$port" --alter \
    --entity-type clients --entity-name "throttled-$run" \
    --add-config "producer_byte_rate=$((QUOTA_MBS * 1024 * 1024))" >/dev/null
  produce "throttled-$run" "$OFFERED_MBS" "$((SECS - 10))" "$log-throttled.log" "$topic" &
  local t=$!
  sleep 20
  produce "free-$run" "$FREE_MBS" "$SECS_BASE" "$log-free-beside.log" "$topic"
  wait "$t"
  echo "$(steady "$log-throttled.log") $(summary "$log-free-alone.log") $(summary "$log-free-beside.log")"
}

# row LABEL FILE: the medians of FILE's runs, each run's figures beside.
row() {
  local col=() i
  for i in 1 2 3 4 5; do col+=("$(cut -d' ' -f$i "$2" | median)"); done
  echo "| $1 | $QUOTA_MBS | ${col[0]} | ${col[1]} / ${col[2]} ms | ${col[3]} / ${col[4]} ms | $(tr '\n' ';' <"$2") |"
}

rows=()
if [ "$ONLY" != cairn ]; then
  port=$(free_port)
  "$KREF/start.sh" "$port" "$work/kafka" >/dev/null
  for run in $(seq 1 "$RUNS"); do measure kafka "$run" >>"$work/kafka.runs"; done
  "$KREF/stop.sh" "$work/kafka" >/dev/null
  rows+=("$(row "Apache Kafka 4.4.0" "$work/kafka.runs")")
fi
if [ "$ONLY" != kafka ]; then
  port=$(free_port)
  "$CAIRN" --override "listeners=PLAINTEXT://127.0.0.1:$port" \
    --override "log.dirs=$work/cairn" --override metrics.listener=none >"$work/cairn.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
  for run in $(seq 1 "$RUNS"); do measure cairn "$run" >>"$work/cairn.runs"; done
  kill -TERM "$pid"; wait "$pid" || true; pid=""
  rows+=("$(row Cairn "$work/cairn.runs")")
fi
mkdir -p "$HERE/results"
{
  echo "Client quotas, $(date -u +%F): \`throttled\` offers $OFFERED_MBS MB/s against a $QUOTA_MBS MB/s producer_byte_rate for $SECS s; \`free\` (no quota) produces at $FREE_MBS MB/s for $SECS_BASE s alone, then beside it. 1 KiB records, acks=1, 8 partitions."
  echo
  echo "Medians of $RUNS runs per broker."
  echo
  echo "| broker | quota MB/s | throttled, steady MB/s | free alone: MB/s / avg latency | free beside throttled | per run: steady, alone MB/s, ms, beside MB/s, ms |"
  echo "|---|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$HERE/results/quota.md"
