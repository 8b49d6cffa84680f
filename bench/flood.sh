#!/usr/bin/env bash
# Usage: bench/flood.sh
#        BENCH_ONLY=kafka|cairn RUNS=N bench/flood.sh
#
# tests/flood.rs's flood (issue 17: 10,000 connections, half of them slowloris, 32 greedy
# consumers sending maximal fetches of a 70 MiB backlog, one normal client producing and
# fetching) sent to Apache Kafka (compat-tests/kafka-ref, 4.4.0, its defaults, -Xmx1G) and
# to Cairn, one after the other, RUNS times each (default 2). Kafka gets a fresh data
# directory per run; the test starts its own Cairn per run.
#
# Reports each run's lines of the test (the normal client's latencies per phase, the greedy
# consumers' bytes, the broker's CPU over the flood and its memory) and whether the test's
# checks held, to bench/results/flood.md. Nothing here fails on a number; a broker that
# fails the test's checks is reported as such.
#
# Knobs, passed through: FLOOD_LARGE_CLAIM (bytes the large slowloris claims, default
# 100 MiB; Kafka without queued.max.request.bytes allocates each claim whole, see
# docs/FLOOD.md) and KAFKA_REF_EXTRA_PROPS (server.properties lines for Kafka, such as
# queued.max.request.bytes=268435456).
#
# The test raises its open-file limit with prlimit; this script raises its own (which the
# Kafka broker inherits), so it needs a hard limit of at least 12,100 (root has it).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
KREF="$ROOT/compat-tests/kafka-ref"
ONLY=${BENCH_ONLY:-both}
RUNS=${RUNS:-2}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/cairn-target}

ulimit -n 12100
(cd "$ROOT" && cargo build --release --locked --test flood >/dev/null 2>&1) ||
  { echo "flood.sh: building tests/flood.rs failed" >&2; exit 1; }
export KAFKA_VERSION=4.4.0
"$ROOT/compat-tests/java/setup.sh" >/dev/null

work=$(mktemp -d /tmp/cairn-flood-bench.XXXXXX)
kdir=""
cleanup() {
  [ -n "$kdir" ] && [ -f "$kdir/kafka.pid" ] && "$KREF/stop.sh" "$kdir" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# flood NAME RUN [ENV...]: one run of the test; its report lines and verdict into
# $work/NAME-RUN.
flood() {
  local name=$1 run=$2 out="$work/$1-$2"
  shift 2
  if (cd "$ROOT" && env "$@" timeout 600 cargo test --release --locked --test flood -- --nocapture) \
      >"$out.log" 2>&1; then
    echo "checks held" >"$out"
  else
    echo "checks FAILED: $(grep -m1 -A1 "panicked at" "$out.log" | tail -1 | cut -c1-300)" >"$out"
  fi
  grep -E '^(flood|broker|quiet|after|broker memory):? ' "$out.log" >>"$out" || true
}

for run in $(seq 1 "$RUNS"); do
  if [ "$ONLY" != cairn ]; then
    kdir="$work/kafka-data-$run"
    port=$("$KREF/port-pair.sh")
    "$KREF/start.sh" "$port" "$kdir" >/dev/null
    flood kafka "$run" FLOOD_BROKER="127.0.0.1:$port" FLOOD_BROKER_PID="$(cat "$kdir/kafka.pid")"
    if ! kill -0 "$(cat "$kdir/kafka.pid")" 2>/dev/null; then
      echo "Kafka exited during the flood; tail of its log:" >>"$work/kafka-$run"
      tail -n 5 "$kdir/kafka.log" >>"$work/kafka-$run"
    fi
    grep -c -E 'OutOfMemoryError' "$kdir/kafka.log" | sed 's/^/OutOfMemoryError lines in kafka.log: /' >>"$work/kafka-$run" || true
    "$KREF/stop.sh" "$kdir" >/dev/null 2>&1 || true
    kdir=""
  fi
  [ "$ONLY" != kafka ] && flood cairn "$run"
done

mkdir -p "$HERE/results"
{
  echo "# The flood of tests/flood.rs, $(date -u +%F): Apache Kafka 4.4.0 (-Xmx1G) and Cairn $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD || echo ' with uncommitted changes')"
  echo
  echo "Large slowloris claims: ${FLOOD_LARGE_CLAIM:-104857600} bytes. Kafka's extra properties: ${KAFKA_REF_EXTRA_PROPS:-none}."
  for f in "$work"/kafka-? "$work"/cairn-?; do
    [ -f "$f" ] || continue
    echo
    echo "## $(basename "$f")"
    echo
    echo '```'
    cat "$f"
    echo '```'
  done
} | tee "$HERE/results/flood.md"
