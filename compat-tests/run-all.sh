#!/usr/bin/env bash
# Runs every real-client suite against the real cairn binary: for each suite, a fresh broker on
# a free loopback port with its own data dir, then the suite's run.sh with BOOTSTRAP pointing
# at it. Each suite's setup.sh first brings in its client (Maven jars, Debian's librdkafka
# source, a PyPI sdist) when missing.
#
# Usage: compat-tests/run-all.sh path/to/cairn [suite...]
# Prints each suite's summary, then one line: "compat: N passed, M failed" (suites).
set -uo pipefail
CAIRN=${1:?usage: run-all.sh path/to/cairn [suite...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(java kcat librdkafka kafka-python franz-go)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

broker_pid=""
work=$(mktemp -d /tmp/cairn-compat.XXXXXX)
stop_broker() {
  if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
    kill -TERM "$broker_pid"
    wait "$broker_pid"
    local rc=$?
    broker_pid=""
    return $rc
  fi
  broker_pid=""
  return 0
}
trap 'stop_broker; rm -rf "$work"' EXIT

start_broker() { # $1: suite name
  local port; port=$(free_port)
  # librdkafka's and kafka-python's tests assume the trivup default of 4 partitions for
  # auto-created topics; kafka-python's also assigns new partitions to broker 0.
  # kafka-python's test_group also joins with a 3 s session timeout (its fixture lowers
  # group.min.session.timeout.ms to 1000, as validate-ref.sh does for Apache Kafka).
  local partitions=1 node=1 min_session=6000
  case "$1" in
    librdkafka) partitions=4 ;;
    kafka-python) partitions=4 node=0 min_session=1000 ;;
  esac
  local data="$work/$1-data"
  "$CAIRN" --override "listeners=PLAINTEXT://127.0.0.1:$port" --override "log.dirs=$data" \
    --override "advertised.listeners=PLAINTEXT://127.0.0.1:$port" \
    --override metrics.listener=none --override "num.partitions=$partitions" --override "node.id=$node" \
    --override "group.min.session.timeout.ms=$min_session" \
    >"$work/$1-broker.log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 1 200); do
    if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
      export BOOTSTRAP="127.0.0.1:$port"
      return 0
    fi
    kill -0 "$broker_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "compat: cairn did not start for $1:"; cat "$work/$1-broker.log"
  return 1
}

passed=0
failed=0
failed_names=()
for s in "${suites[@]}"; do
  case "$s" in
    kcat) setup="$here/librdkafka/setup.sh"; run="$here/librdkafka/smoke-kcat.sh" ;;
    *) setup="$here/$s/setup.sh"; run="$here/$s/run.sh" ;;
  esac
  echo "=== $s: setup"
  if ! "$setup"; then
    echo "=== $s: setup FAILED"
    failed=$((failed + 1)); failed_names+=("$s(setup)")
    continue
  fi
  echo "=== $s: run"
  start_broker "$s" || { failed=$((failed + 1)); failed_names+=("$s(start)"); continue; }
  "$run" 2>&1 | tee "$work/$s.out"
  rc=${PIPESTATUS[0]}
  alive=yes
  kill -0 "$broker_pid" 2>/dev/null || alive=no
  stop_broker; stop_rc=$?
  if [ "$alive" = no ]; then
    echo "=== $s: the broker DIED during the suite; its log:"; tail -50 "$work/$s-broker.log"
    rc=1
  elif [ "$stop_rc" != 0 ]; then
    echo "=== $s: the broker exited $stop_rc on SIGTERM; its log:"; tail -50 "$work/$s-broker.log"
    rc=1
  fi
  if grep -q -E "panicked|ERROR" "$work/$s-broker.log"; then
    echo "=== $s: the broker logged errors:"; grep -E "panicked|ERROR" "$work/$s-broker.log" | head -20
  fi
  if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names+=("$s"); fi
done
# CI keeps only the end of the output: repeat what failed, with the end of each failed test's
# log where the suite names one ("(log: path)").
for s in "${failed_names[@]}"; do
  [ -f "$work/$s.out" ] || continue
  echo "=== $s: failures"
  grep -E '^(FAIL|FAILED|--- FAIL|not ok)|[0-9]+ failed' "$work/$s.out" | head -20
  grep -oE '\(log: [^)]+\)' "$work/$s.out" | head -3 | sed -E 's/^\(log: (.*)\)$/\1/' | while read -r log; do
    echo "--- end of $log"; tail -25 "$log" 2>/dev/null | cut -c1-300
  done
done
[ ${#failed_names[@]} -eq 0 ] || echo "compat: failing suites: ${failed_names[*]}"
echo "compat: $passed passed, $failed failed"
[ "$failed" = 0 ]
